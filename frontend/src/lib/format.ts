// Units follow the server's contract: memory in bytes, power in watts,
// temperature in degrees Celsius, utilization in percent (0-100).

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

export function fmtBytes(n: number | null | undefined): string {
  if (n == null || Number.isNaN(n)) return '—';
  if (n === 0) return '0 B';
  if (Math.abs(n) >= GiB) return `${(n / GiB).toFixed(1)} GiB`;
  if (Math.abs(n) >= MiB) return `${Math.round(n / MiB)} MiB`;
  if (Math.abs(n) < 1024) return `${n} B`;
  return `${Math.round(n / 1024)} KiB`;
}

export function fmtPct(n: number | null | undefined): string {
  return n == null || Number.isNaN(n) ? '—' : `${Math.round(n)}%`;
}

export function fmtTemp(n: number | null | undefined): string {
  return n == null ? '—' : `${Math.round(n)}°C`;
}

export function fmtWatts(n: number | null | undefined): string {
  if (n == null) return '—';
  return n >= 1000 ? `${(n / 1000).toFixed(2)} kW` : `${Math.round(n)} W`;
}

export function fmtDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '—';
  const s = Math.floor(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (h > 0) return `${h}h ${String(m).padStart(2, '0')}m`;
  if (m > 0) return `${m}m ${String(sec).padStart(2, '0')}s`;
  return `${sec}s`;
}

/** Elapsed time of a run: until it finished, or until now while it runs. */
export function elapsed(startedAt: string | null | undefined, finishedAt: string | null | undefined, now = Date.now()): string {
  if (!startedAt) return '—';
  const end = finishedAt ? Date.parse(finishedAt) : now;
  return fmtDuration(end - Date.parse(startedAt));
}

export function fmtLoss(n: number | null | undefined): string {
  if (n == null || Number.isNaN(n)) return '—';
  if (n !== 0 && (Math.abs(n) < 1e-3 || Math.abs(n) >= 1e4)) return n.toExponential(3);
  return n.toPrecision(4);
}

/** A metric from a free-form dict: a finite number, or null. */
export function num(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

export function shortId(id: string): string {
  return id.slice(0, 8);
}
