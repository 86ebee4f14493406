import type { Training } from '../../api/types';

type Sharing = Pick<Training, 'status' | 'preempted_by' | 'idle_since' | 'idle_warned_at'>;

function since(iso: string | null | undefined): string {
  return iso ? new Date(iso).toLocaleString() : 'a while';
}

/**
 * What sharing the fleet does to a training now: its GPUs sit idle (it was
 * warned and may be reclaimed), or a higher-priority training asked it to
 * make room (it is checkpointing, or keeps its GPUs for that one).
 */
export function SharingBadges({ t }: { t: Sharing }) {
  const badges = [];
  if (t.status === 'running' && t.idle_warned_at) {
    badges.push(
      <span key="idle" className="badge badge-idle" data-testid="badge-idle" title={`GPUs below the idle threshold since ${since(t.idle_since)}`}>
        idle
      </span>,
    );
  }
  if (t.preempted_by && (t.status === 'running' || t.status === 'preempted')) {
    const who = t.preempted_by.slice(0, 8);
    badges.push(
      <span
        key="preempt"
        className="badge badge-stopping"
        data-testid="badge-preempted-by"
        title={t.status === 'running' ? `checkpointing to make room for training ${t.preempted_by}` : `its GPUs are kept for training ${t.preempted_by}`}
      >
        {t.status === 'running' ? `making room for ${who}` : `GPUs kept for ${who}`}
      </span>,
    );
  }
  return <>{badges}</>;
}
