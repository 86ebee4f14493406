import { Link } from 'react-router-dom';
import { ListFilters, useListFilters } from '../../components/ListFilters';
import { Empty, ErrorState, Loading } from '../../components/States';
import { SessionRow } from './SessionRow';
import { useSessions } from './useSessions';

const STATUSES = ['queued', 'starting', 'running', 'stopping', 'stopped', 'failed'];

export function SessionsPage() {
  const { status, owner, set } = useListFilters();
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
      <ListFilters idPrefix="s" statuses={STATUSES} status={status} owner={owner} set={set} />
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
