import { Link } from 'react-router-dom';
import { endpoints } from '../../api/endpoints';
import { useQuery } from '../../api/useQuery';
import { Empty, ErrorState, Loading, Pill } from '../../components/States';

/** Every sweep, newest first: its progress and its best trial. */
export function SweepsPage() {
  const q = useQuery('sweeps', (signal) => endpoints.sweeps(signal), 5000);
  return (
    <div className="page">
      <div className="page-head">
        <h2>Sweeps</h2>
        <Link className="button primary" to="/sweeps/new">
          New sweep
        </Link>
      </div>
      <p className="field-help">
        Start one here (<Link to="/sweeps/new">New sweep</Link>) or with <code>gpufleet sweep start FILE</code> (docs: Sweeps).
        Each trial is a training of yours in the same queue.
      </p>
      {q.error && <ErrorState error={q.error} onRetry={q.reload} />}
      {!q.data && !q.error && <Loading what="sweeps" />}
      {q.data && q.data.data.length === 0 && <Empty title="No sweep yet." />}
      {q.data && q.data.data.length > 0 && (
        <table className="table" data-testid="sweeps-table">
          <thead>
            <tr>
              <th>Name</th>
              <th>Owner</th>
              <th>Status</th>
              <th>Method</th>
              <th>Trials ended</th>
              <th>Best</th>
            </tr>
          </thead>
          <tbody>
            {q.data.data.map((s) => {
              const by = s.trials_by_state;
              const ended = ['complete', 'pruned', 'failed', 'cancelled'].reduce((n, k) => n + (by[k] ?? 0), 0);
              return (
                <tr key={s.id}>
                  <td>
                    <Link to={`/sweeps/${s.id}`}>{s.name}</Link>
                  </td>
                  <td>{s.owner}</td>
                  <td>
                    <Pill value={s.status} />
                  </td>
                  <td>{s.method + (s.early_stopping ? ' + ASHA' : '')}</td>
                  <td>
                    {ended} / {s.total_trials}
                  </td>
                  <td>{s.best_trial == null ? '–' : `trial ${s.best_trial}`}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </div>
  );
}
