import type { Training } from '../../api/types';
import { fmtDuration } from '../../lib/format';

/** "in about 12m" until the time, "any moment" once it has passed. */
export function startsIn(iso: string, now = Date.now()): string {
  const ms = Date.parse(iso) - now;
  return ms > 0 ? `in about ${fmtDuration(ms)}` : 'any moment';
}

/** "#3 in queue" for a queued training the server placed in its queue, with the expected start where the server can tell; nothing otherwise. */
export function QueuePlace({ t }: { t: Pick<Training, 'status' | 'queue_position' | 'expected_start'> }) {
  if (t.status !== 'queued' || t.queue_position == null) return null;
  return (
    <span className="queue-place" data-testid="queue-place" title="Its place in the scheduler's queue (priority, then age); 1 is served next">
      #{t.queue_position} in queue
      {t.expected_start && (
        <span title={`when the GPUs kept for it free up: ${new Date(t.expected_start).toLocaleString()}`}>
          {' '}· starts {startsIn(t.expected_start)}
        </span>
      )}
    </span>
  );
}
