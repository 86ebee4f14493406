import { useMemo, useRef, useState } from 'react';
import { endpoints } from '../../api/endpoints';
import { Link } from 'react-router-dom';
import type { Booking, GPU, GPULive, GPUProcess, Holder, HistorySeries } from '../../api/types';
import { Bar } from '../../components/Bar';
import { Chart } from '../../components/Chart';
import { Pill } from '../../components/States';
import { fmtBytes, fmtPct, fmtTemp, fmtWatts, shortId } from '../../lib/format';
import { useVisible } from '../../lib/useVisible';
import { useGpuStream } from './useGpuStream';
import { fmtDay, fmtTime } from '../calendar/calendar';

/** How each vendor's GPUs are named and which runtime drives them. */
const VENDOR_NAMES: Record<string, string> = { nvidia: 'NVIDIA', amd: 'AMD', intel: 'Intel' };

const MINI_SERIES = [
  { label: 'util %', color: '#4fb3ff', fill: true },
  { label: 'mem %', color: '#f5b945' },
];

/** Who holds the GPU: gpufleet trainings (from the reservations), then foreign processes. */
export function Holders({ gpu, live }: { gpu: GPU; live: Partial<GPULive> | null }) {
  const holders = (gpu.availability?.holders ?? []) as Holder[];
  const procs = live?.processes ?? [];
  // Foreign processes: the live sample's, else the availability service's view.
  const foreign: GPUProcess[] = procs.length
    ? procs.filter((p) => p.foreign !== false)
    : holders.filter((h) => h.pid != null).map((h) => ({ pid: h.pid!, user: h.user, command: h.command, used_memory: h.used_memory, foreign: true }));
  const trainings = new Map<string, Holder>();
  for (const h of holders) if (h.training_id) trainings.set(h.training_id, h);
  for (const p of procs) if (p.foreign === false && p.training_id && !trainings.has(p.training_id)) trainings.set(p.training_id, { training_id: p.training_id });
  if (trainings.size === 0 && foreign.length === 0) return <div className="holders holders-none">No processes</div>;
  return (
    <ul className="holders">
      {[...trainings.values()].map((h) => {
        const session = h.kind === 'session';
        return (
          <li key={h.training_id}>
            <span className="holder-kind">{session ? 'session' : 'training'}</span>{' '}
            <Link to={session ? '/sessions' : `/trainings/${h.training_id}`}>{h.training_name ?? h.name ?? shortId(h.training_id!)}</Link>
            {h.owner && <span className="muted"> · {h.owner}</span>}
          </li>
        );
      })}
      {foreign.map((p) => (
        <li key={p.pid} className="holder-foreign" title={p.command ?? undefined}>
          <span className="holder-kind">foreign</span> pid {p.pid}
          {p.user && <span> · {p.user}</span>}
          {p.command && <span className="muted"> · {p.command.split(/\s+/)[0].split('/').pop()}</span>}
          {p.used_memory != null && <span className="muted"> · {fmtBytes(p.used_memory)}</span>}
        </li>
      ))}
    </ul>
  );
}

/** An admin's action on a GPU: a small button that says "…" while the request runs and shows why it failed. */
function GpuAction({ label, title, run, onChanged }: { label: string; title: string; run: () => Promise<unknown>; onChanged?: () => void }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const click = async () => {
    setBusy(true);
    setError(null);
    try {
      await run();
      onChanged?.();
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      <button type="button" className="btn-small" disabled={busy} onClick={click} title={title}>
        {busy ? '…' : label}
      </button>
      {error && <span className="field-error" role="alert">{error}</span>}
    </>
  );
}

/** Admins take a GPU out of scheduling (trainings on it keep running) and put it back. */
export function DrainButton({ gpu, onChanged }: { gpu: GPU; onChanged?: () => void }) {
  return gpu.drained ? (
    <GpuAction label="Undrain" title="Let the scheduler place trainings on this GPU again" run={() => endpoints.undrain(gpu.host, gpu.index)} onChanged={onChanged} />
  ) : (
    <GpuAction label="Drain" title="Stop placing trainings on this GPU; trainings on it keep running"
      run={() => endpoints.drain(gpu.host, gpu.index, 'drained from the dashboard')} onChanged={onChanged} />
  );
}

/** A GPU its samples marked unhealthy (fatal XID, row remap, ECC) stays out of scheduling until an admin clears the mark. */
export function ClearHealthButton({ gpu, onChanged }: { gpu: GPU; onChanged?: () => void }) {
  if (!(gpu.status_reason ?? '').startsWith(HEALTH_PREFIX)) return null;
  return (
    <GpuAction label="Clear health" title={`Put this GPU back in scheduling (marked for: ${gpu.status_reason!.slice(HEALTH_PREFIX.length)})`}
      run={() => endpoints.clearHealth(gpu.host, gpu.index)} onChanged={onChanged} />
  );
}

/** How the server marks a GPU's status reason when its samples took it out of scheduling (telemetry/gpu_health.py). */
export const HEALTH_PREFIX = 'health: ';

/** The GPU's booking now or next (who, from or until when), in the viewer's zone. */
function NextBooking({ booking }: { booking: Booking }) {
  const start = new Date(booking.start);
  const end = new Date(booking.end);
  const who = booking.kind === 'maintenance' ? 'maintenance' : booking.owner;
  const text = start.getTime() <= Date.now() ? `Booked: ${who} until ${fmtDay(end)} ${fmtTime(end)}` : `Next booking: ${who} from ${fmtDay(start)} ${fmtTime(start)}`;
  return (
    <div className="gpu-booking muted" data-testid="gpu-next-booking">
      <Link to="/calendar">{text}</Link>
    </div>
  );
}

export function GpuCard({ gpu, seed, admin, onChanged, nextBooking }: { gpu: GPU; seed?: HistorySeries; admin?: boolean; onChanged?: () => void; nextBooking?: Booking }) {
  const ref = useRef<HTMLElement>(null);
  const visible = useVisible(ref);
  const { live, util, mem, version } = useGpuStream(gpu.host, gpu.index, gpu.live, visible, seed, gpu.memory_total);
  const data = useMemo(() => {
    const [x, u] = util.columns();
    const [, m] = mem.columns();
    return [x, u, m];
    // The rings mutate in place; `version` is what says they changed.
  }, [version]);

  const total = live?.memory_total ?? gpu.memory_total ?? null;
  const used = live?.memory_used ?? null;
  const state = gpu.availability?.state ?? (gpu.drained ? 'drained' : gpu.status === 'ok' ? 'unknown' : gpu.status);
  const lost = live?.lost;
  return (
    <article ref={ref} className={`gpu-card${lost ? ' gpu-lost' : ''}`} data-testid={`gpu-card-${gpu.host}-${gpu.index}`} aria-label={`GPU ${gpu.index} on ${gpu.host}`}>
      <header className="gpu-card-head">
        <div>
          <span className="gpu-title" data-testid="gpu-title">
            <Link className="gpu-index" to={`/gpus/${encodeURIComponent(gpu.host)}/${gpu.index}`} title="this GPU's page: what runs on it, its health, its history">
              GPU {gpu.index}
            </Link>
            <span className="gpu-name" title={gpu.name}>
              {gpu.name}
            </span>
          </span>
          <span className="gpu-vendor muted" data-testid="gpu-vendor" title="vendor · backend">
            {VENDOR_NAMES[gpu.vendor] ?? gpu.vendor} · {gpu.backend}
          </span>
        </div>
        <Pill value={lost ? 'unhealthy' : state} title={gpu.availability?.reason ?? gpu.status_reason ?? undefined} />
      </header>
      {gpu.availability?.reason && (
        <div className="gpu-reason" title={gpu.availability.reason}>
          {gpu.availability.reason}
        </div>
      )}
      {/* A busy GPU is a GPU doing its job: utilization never turns red. */}
      <Bar label="Utilization" value={live?.utilization} text={fmtPct(live?.utilization)} tone="ok" />
      <Bar label="Memory" value={used} max={total ?? 0} text={`${fmtBytes(used)} / ${fmtBytes(total)}`} />
      <div className="gpu-stats">
        <span title="temperature">
          <span className="muted">Temp</span> <b data-testid="gpu-temp">{fmtTemp(live?.temperature)}</b>
        </span>
        <span title="power draw / limit">
          <span className="muted">Power</span> <b>{live?.power_draw == null ? '—' : fmtWatts(live.power_draw).replace(/ W$/, '')}</b>
          {live?.power_limit != null ? <span className="muted">/{fmtWatts(live.power_limit)}</span> : live?.power_draw != null && ' W'}
        </span>
        {live?.sm_clock != null && (
          <span>
            <span className="muted">SM</span> <b>{Math.round(live.sm_clock)} MHz</b>
          </span>
        )}
      </div>
      {/* The caption sits above the chart, never over its line. */}
      <div className="mini-caption" aria-hidden>
        last 5 min · <span style={{ color: '#4fb3ff' }}>util</span> · <span style={{ color: '#f5b945' }}>mem</span>
      </div>
      <div className="mini-wrap" title="utilization (blue) and memory (amber), last 5 minutes">
        <Chart series={MINI_SERIES} data={data} height={48} mini yMin={0} yMax={100} windowSec={300} testId={`gpu-chart-${gpu.index}`} />
      </div>
      <Holders gpu={gpu} live={live} />
      {nextBooking && <NextBooking booking={nextBooking} />}
      <footer className="gpu-card-foot">
        <span className="foot-actions">
          <Link to={`/history?gpu=${encodeURIComponent(`${gpu.host}:${gpu.index}`)}`}>History</Link>
          {admin && <DrainButton gpu={gpu} onChanged={onChanged} />}
          {admin && <ClearHealthButton gpu={gpu} onChanged={onChanged} />}
        </span>
        <span className="muted" data-testid="gpu-updated">{live?.timestamp ? new Date(live.timestamp).toLocaleTimeString() : 'no sample yet'}</span>
      </footer>
    </article>
  );
}
