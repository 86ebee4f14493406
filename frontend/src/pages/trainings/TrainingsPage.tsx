import { Link } from 'react-router-dom';
import { endpoints } from '../../api/endpoints';
import { TRAINING_STATUSES, type Training } from '../../api/types';
import { useQuery } from '../../api/useQuery';
import { ListFilters, useListFilters } from '../../components/ListFilters';
import { Empty, ErrorState, Loading, Pill } from '../../components/States';
import { elapsed, fmtLoss } from '../../lib/format';
import { SharingBadges } from './SharingBadges';
import { QueuePlace } from './QueueView';

const STATUSES = TRAINING_STATUSES;
const PAGE = 50;

const ENDED = new Set(['succeeded', 'failed', 'cancelled', 'reclaimed', 'pruned']);

export function Progress({ t }: { t: Pick<Training, 'step' | 'max_steps' | 'status'> }) {
  // A script that never called gpufleet.report(): no steps to count, which is not "0 of unknown".
  if (!t.max_steps && !t.step) {
    return (
      <span className="muted" data-testid="no-steps" style={{ fontSize: '0.78rem' }}>
        {ENDED.has(t.status) ? 'no steps reported' : 'no steps reported yet'}
      </span>
    );
  }
  // A run that did not say its total (gpufleet.report(total_steps=…)) and ended well ran all its steps.
  const max = t.max_steps ?? (t.status === 'succeeded' ? (t.step ?? 0) : 0);
  // A finished run that counted from 0 (range(N)) reports N-1 last: it is N of N, not one short.
  const step = t.status === 'succeeded' && max && t.step === max - 1 ? max : (t.step ?? 0);
  const frac = max ? Math.min(1, step / max) : t.status === 'succeeded' ? 1 : 0;
  return (
    <div title={`step ${step} of ${max || '?'}`} style={{ minWidth: 110 }}>
      <div className="progress" role="progressbar" aria-valuemin={0} aria-valuemax={max || 100} aria-valuenow={step}>
        <div style={{ width: `${(frac * 100).toFixed(1)}%` }} />
      </div>
      <span className="muted" style={{ fontSize: '0.78rem' }}>
        {step} / {max || '?'}
      </span>
    </div>
  );
}

export function gpuText(t: Training): string {
  // A training across hosts: every host's GPUs, rank 0's host first.
  if (t.hosts?.length) return t.hosts.map((h) => `${h.host}: ${h.gpu_ids.join(', ')}`).join(' + ');
  // A pool's scheduler chose its nodes and GPUs; its events name the nodes.
  if (t.pool) return `Slurm pool ${t.pool}`;
  if (!t.gpu_ids?.length) return 'auto';
  return `${t.host_name ? `${t.host_name}: ` : ''}${t.gpu_ids.join(', ')}`;
}

export function TrainingsTable({ rows }: { rows: Training[] }) {
  return (
    <table className="table" data-testid="trainings-table">
      <thead>
        <tr>
          <th scope="col">Name</th>
          <th scope="col">Status</th>
          <th scope="col">Progress</th>
          <th scope="col">Loss</th>
          <th scope="col">GPUs</th>
          <th scope="col">Owner</th>
          <th scope="col">Elapsed</th>
          <th scope="col">Created</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((t) => (
          <tr key={t.id} data-testid={`training-row-${t.id}`}>
            <td>
              <Link to={`/trainings/${t.id}`}>{t.name}</Link>
              <div className="muted" style={{ fontSize: '0.78rem' }}>
                {t.recipe}
              </div>
            </td>
            <td>
              <Pill value={t.status} title={t.status_reason ?? t.wait_reason ?? undefined} />
              <SharingBadges t={t} />
              <QueuePlace t={t} />
            </td>
            <td>
              <Progress t={t} />
            </td>
            <td className="num">{fmtLoss(t.last_loss)}</td>
            <td>{gpuText(t)}</td>
            <td>{t.owner}</td>
            <td className="num">{elapsed(t.started_at, t.finished_at)}</td>
            <td className="muted">{new Date(t.created_at).toLocaleString()}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function TrainingsPage() {
  const { status, owner, offset, set } = useListFilters();
  const q = useQuery(`trainings|${status}|${owner}|${offset}`, (s) => endpoints.trainings({ status: status || undefined, owner: owner || undefined, limit: PAGE, offset }, s), 3000);
  const rows = q.data?.data ?? [];
  const count = q.data?.count ?? 0;
  return (
    <div className="page">
      <div className="page-head">
        <h2>Trainings</h2>
        <span className="muted">{q.data ? `${count} total` : ''}</span>
        <div className="actions">
          <Link to="/trainings/new" className="button primary">
            New training
          </Link>
        </div>
      </div>
      <ListFilters idPrefix="f" statuses={STATUSES} status={status} owner={owner} set={set} />
      {q.error && !q.data ? (
        <ErrorState error={q.error} onRetry={q.reload} />
      ) : !q.data ? (
        <Loading what="trainings" />
      ) : rows.length === 0 ? (
        <Empty title={status || owner ? 'No training matches these filters.' : 'No trainings yet.'}>
          <Link to="/trainings/new">Start one</Link> from a recipe, or submit with <code>gpufleet train</code>.
        </Empty>
      ) : (
        <div className="panel">
          <TrainingsTable rows={rows} />
          {count > PAGE && (
            <div className="actions" style={{ marginTop: '0.6rem' }}>
              <button type="button" disabled={offset === 0} onClick={() => set('offset', String(Math.max(0, offset - PAGE)))}>
                Previous
              </button>
              <span className="muted">
                {offset + 1}–{Math.min(count, offset + PAGE)} of {count}
              </span>
              <button type="button" disabled={offset + PAGE >= count} onClick={() => set('offset', String(offset + PAGE))}>
                Next
              </button>
            </div>
          )}
        </div>
      )}
    </div>
  );
}
