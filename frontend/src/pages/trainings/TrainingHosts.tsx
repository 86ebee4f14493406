import type { Training, TrainingMetric } from '../../api/types';
import { Pill } from '../../components/States';
import { stragglers } from './TrainingCharts';

/** A training across hosts: each host, its global ranks and GPUs, its worker's state and the newest
 * step time of each of its ranks (a straggler marked, whichever host it is on). */
export function TrainingHosts({ t, metrics }: { t: Training; metrics: TrainingMetric[] }) {
  const hosts = t.hosts ?? [];
  const withTimes = metrics.filter((m) => m.rank_step_times?.length);
  const times = withTimes.length ? (withTimes[withTimes.length - 1].rank_step_times ?? []) : [];
  const slow = stragglers(times);
  return (
    <div className="panel" data-testid="training-hosts">
      <h3>
        Hosts ({hosts.length}, {t.world_size} ranks)
      </h3>
      <table className="table">
        <thead>
          <tr>
            <th>Host</th>
            <th>Ranks</th>
            <th>GPUs</th>
            <th>State</th>
            <th>Step time per rank</th>
          </tr>
        </thead>
        <tbody>
          {hosts.map((h) => (
            <tr key={h.host} data-testid={`host-${h.node_rank}`}>
              <td>
                {h.host}
                {h.node_rank === 0 && <span className="muted"> · rank 0, rendezvous</span>}
              </td>
              <td>
                {h.ranks[0]}–{h.ranks[h.ranks.length - 1]}
              </td>
              <td>{h.gpu_ids.join(', ')}</td>
              <td>
                <Pill value={h.status} />
                {h.message && <span className="field-error"> {h.message}</span>}
              </td>
              <td>
                {h.ranks.map((r) =>
                  times[r] == null ? null : (
                    <span key={r} className={slow.has(r) ? 'bad' : undefined}>
                      r{r} {(times[r] * 1e3).toFixed(0)} ms{slow.has(r) ? ' slow' : ''}{' '}
                    </span>
                  ),
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
