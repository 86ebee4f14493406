import { endpoints } from '../../api/endpoints';
import type { Training } from '../../api/types';
import { useQuery } from '../../api/useQuery';

/** "#3 in queue" for a queued training the server placed in its queue; nothing otherwise. */
export function QueuePlace({ t }: { t: Pick<Training, 'status' | 'queue_position'> }) {
  if (t.status !== 'queued' || t.queue_position == null) return null;
  return (
    <span className="queue-place" data-testid="queue-place" title="Its place in the scheduler's queue (priority, then age); 1 is served next">
      #{t.queue_position} in queue
    </span>
  );
}

/** The signed-in person's name, or null while unknown (or when no one is signed in). */
export function useMe(): string | null {
  const q = useQuery('whoami', (s) => endpoints.whoami(s));
  return q.data?.name ?? null;
}

/** "Only mine": the owner filter set to the signed-in person. */
export function MineFilter({ owner, onOwner }: { owner: string; onOwner: (v: string) => void }) {
  const me = useMe();
  return (
    <div className="field field-inline">
      <label>
        <input type="checkbox" disabled={!me} checked={!!me && owner === me} onChange={(e) => onOwner(e.target.checked && me ? me : '')} /> Only mine
      </label>
    </div>
  );
}
