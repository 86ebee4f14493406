import { Link, useSearchParams } from 'react-router-dom';
import { Empty, ErrorState, Loading } from '../../components/States';
import { MineFilter } from '../trainings/QueueView';
import { SessionRow } from './SessionRow';
import { useSessions } from './useSessions';

const STATUSES = ['queued', 'starting', 'running', 'stopping', 'stopped', 'failed'];

export function SessionsPage() {
  const [params, setParams] = useSearchParams();
  const status = params.get('status') ?? '';
  const owner = params.get('owner') ?? '';
  const set = (k: string, v: string) => {
    const next = new URLSearchParams(params);
    if (v) next.set(k, v);
    else next.delete(k);
    setParams(next, { replace: true });
  };
  const q = useSessions(owner, status);
  const rows = q.data?.items ?? [];
  return (
    <div className="page">
      <div className="page-head">
        <h2>Sessions</h2>
        <span className="muted">{q.data ? `${q.data.total} total` : ''}</span>
        <div className="actions">
          <Link to="/sessions/new" className="button primary">
            New session
          </Link>
        </div>
      </div>
      <div className="filters">
        <div className="field">
          <label htmlFor="s-status">Status</label>
          <select id="s-status" value={status} onChange={(e) => set('status', e.target.value)}>
            <option value="">any</option>
            {STATUSES.map((s) => (
              <option key={s}>{s}</option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="s-owner">Owner</label>
          <input id="s-owner" value={owner} placeholder="anyone" onChange={(e) => set('owner', e.target.value)} />
        </div>
        <MineFilter owner={owner} onOwner={(v) => set('owner', v)} />
      </div>
      {q.error && !q.data ? (
        <ErrorState error={q.error} onRetry={q.reload} />
      ) : !q.data ? (
        <Loading what="sessions" />
      ) : rows.length === 0 ? (
        <Empty title={status || owner ? 'No session matches these filters.' : 'No sessions yet.'}>
          <Link to="/sessions/new">Start one</Link>, or run <code>gpufleet session start --gpus 1 --jupyter</code>.
        </Empty>
      ) : (
        <div className="panel">
          <table className="table" data-testid="sessions-table">
            <thead>
              <tr>
                <th scope="col">Session</th>
                <th scope="col">Status</th>
                <th scope="col">GPUs</th>
                <th scope="col">Host</th>
                <th scope="col">Owner</th>
                <th scope="col">Time left</th>
                <th scope="col">Idle</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((s) => (
                <SessionRow key={s.id} s={s} onChanged={q.reload} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
