import { Link, useParams } from 'react-router-dom';
import { endpoints } from '../../api/endpoints';
import type { GPU, GPUProcess, Holder } from '../../api/types';
import { useQuery } from '../../api/useQuery';
import { Bar } from '../../components/Bar';
import { Empty, ErrorState, Loading, Pill } from '../../components/States';
import { fmtBytes, fmtPct, fmtTemp, fmtWatts, shortId } from '../../lib/format';
import { HistoryCharts } from '../history/HistoryCharts';
import { POINTS } from '../history/history';
import { ClearHealthButton, DrainButton, HEALTH_PREFIX } from './GpuCard';
import { useFleet } from './useFleet';
import { useGpuStream } from './useGpuStream';

/** Who holds this GPU: gpufleet's reservations (work and its owner) and every process on it, ours or not. */
function WhoHoldsIt({ gpu, processes }: { gpu: GPU; processes: GPUProcess[] }) {
  const holders = ((gpu.availability?.holders ?? []) as Holder[]).filter((h) => h.training_id);
  return (
    <section className="panel" aria-label="What runs on it">
      <h3>What runs on it</h3>
      {holders.length === 0 && processes.length === 0 && <p className="muted">Nothing: no reservation and no process.</p>}
      {holders.length > 0 && (
        <table className="table" data-testid="gpu-reservations">
          <thead>
            <tr>
              <th>Reserved by</th>
              <th>Owner</th>
              <th>Use</th>
            </tr>
          </thead>
          <tbody>
            {holders.map((h) => (
              <tr key={h.training_id}>
                <td>
                  <Link to={`/trainings/${h.training_id}`}>{h.training_name ?? h.name ?? shortId(h.training_id!)}</Link>
                </td>
                <td>{h.owner ?? '–'}</td>
                <td>{h.exclusive === false ? 'shared (packed by memory)' : 'whole GPU'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {processes.length > 0 && (
        <table className="table" data-testid="gpu-processes">
          <thead>
            <tr>
              <th>PID</th>
              <th>Account</th>
              <th>Command</th>
              <th>Memory</th>
              <th>Whose</th>
            </tr>
          </thead>
          <tbody>
            {processes.map((p) => (
              <tr key={p.pid}>
                <td className="num">{p.pid}</td>
                <td>{p.user ?? '–'}</td>
                <td>
                  <code>{p.command ?? '–'}</code>
                </td>
                <td className="num">{fmtBytes(p.used_memory)}</td>
                <td>
                  {p.foreign === false && p.training_id ? (
                    <Link to={`/trainings/${p.training_id}`}>gpufleet · {shortId(p.training_id)}</Link>
                  ) : (
                    <span title="a process gpufleet did not start: the scheduler counts its memory and works around it">not gpufleet's</span>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

/** One GPU: its identity, live state, health marks, who holds it and what runs on it, and its last hour. */
export function GpuPage() {
  const { host = '', index = '0' } = useParams();
  const fleet = useFleet(10_000);
  const me = useQuery('whoami', (s) => endpoints.whoami(s));
  const gpu = fleet.gpus.find((g) => g.host === host && String(g.index) === index);
  const { live } = useGpuStream(host, Number(index), gpu?.live ?? null, true, undefined, gpu?.memory_total ?? null);
  const history = useQuery(
    gpu ? `gpu-history:${host}:${index}` : null,
    (signal) => {
      const to = new Date();
      return endpoints.history({ gpu: `${host}:${index}`, from: new Date(to.getTime() - 3600_000).toISOString(), to: to.toISOString(), points: POINTS }, signal);
    },
    15_000,
  );
  if (fleet.error && !fleet.gpus.length) return <div className="page"><ErrorState error={fleet.error} onRetry={fleet.reload} /></div>;
  if (!gpu) {
    return (
      <div className="page">
        {fleet.loading ? <Loading what="the GPU" /> : <Empty title={`No GPU ${index} on ${host}.`}><Link to="/">Back to the fleet</Link></Empty>}
      </div>
    );
  }
  const admin = me.data?.role === 'admin';
  const health = (gpu.status_reason ?? '').startsWith(HEALTH_PREFIX) ? gpu.status_reason!.slice(HEALTH_PREFIX.length) : null;
  const state = gpu.availability?.state ?? (gpu.drained ? 'drained' : gpu.status);
  const total = live?.memory_total ?? gpu.memory_total ?? null;
  return (
    <div className="page" data-testid="gpu-page">
      <div className="page-head">
        <h2>
          GPU {gpu.index} · {gpu.name} <span className="muted">on {gpu.host}</span>
        </h2>
        <Pill value={live?.lost ? 'unhealthy' : state} title={gpu.availability?.reason ?? undefined} />
      </div>
      <div className="gpu-page-grid">
        <section className="panel" aria-label="State">
          <h3>State</h3>
          {gpu.availability?.reason && <p className="gpu-reason">{gpu.availability.reason}</p>}
          <Bar label="Utilization" value={live?.utilization} text={fmtPct(live?.utilization)} tone="ok" />
          <Bar label="Memory" value={live?.memory_used ?? null} max={total ?? 0} text={`${fmtBytes(live?.memory_used)} / ${fmtBytes(total)}`} />
          <dl className="facts">
            <dt>Temperature</dt>
            <dd>{fmtTemp(live?.temperature)}</dd>
            <dt>Power</dt>
            <dd>
              {fmtWatts(live?.power_draw)}
              {live?.power_limit != null && <span className="muted"> of {fmtWatts(live.power_limit)}</span>}
            </dd>
            <dt>Scheduling</dt>
            <dd data-testid="gpu-scheduling">
              {gpu.drained ? `drained${gpu.drain_reason ? `: ${gpu.drain_reason}` : ''}` : health ? `out: marked unhealthy (${health})` : 'in'}
            </dd>
            <dt>Health</dt>
            <dd data-testid="gpu-health">{health ? `marked: ${health}` : 'no mark'}</dd>
          </dl>
          {admin && (
            <div className="actions">
              <DrainButton gpu={gpu} onChanged={fleet.reload} />
              <ClearHealthButton gpu={gpu} onChanged={fleet.reload} />
            </div>
          )}
        </section>
        <section className="panel" aria-label="Identity">
          <h3>Identity</h3>
          <dl className="facts">
            <dt>Vendor</dt>
            <dd>
              {gpu.vendor} · {gpu.backend}
              {gpu.simulated && ' (simulated)'}
            </dd>
            <dt>UUID</dt>
            <dd>
              <code>{gpu.uuid ?? '–'}</code>
            </dd>
            <dt>PCI bus</dt>
            <dd>
              <code>{gpu.pci_bus_id ?? '–'}</code>
            </dd>
            <dt>Compute capability</dt>
            <dd>{gpu.compute_capability ?? '–'}</dd>
            <dt>Memory</dt>
            <dd>{fmtBytes(gpu.memory_total)}</dd>
          </dl>
        </section>
      </div>
      <WhoHoldsIt gpu={gpu} processes={live?.processes ?? []} />
      <div className="page-head">
        <h3>Last hour</h3>
        <Link to={`/history?gpu=${encodeURIComponent(`${gpu.host}:${gpu.index}`)}`}>Longer ranges</Link>
      </div>
      {history.error && !history.data && <ErrorState error={history.error} onRetry={history.reload} />}
      {!history.data && !history.error && <Loading what="history" />}
      {history.data && <HistoryCharts data={history.data} />}
    </div>
  );
}
