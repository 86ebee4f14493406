import type { HistoryMetric } from '../../api/endpoints';
import type { HistoryPoint, HistoryResponse } from '../../api/types';

/** Each range, and how often its charts are refreshed while on screen. */
export const RANGES = {
  '1h': { label: 'Last hour', seconds: 3600, refreshMs: 15_000 },
  '24h': { label: 'Last day', seconds: 86400, refreshMs: 120_000 },
  '7d': { label: 'Last week', seconds: 7 * 86400, refreshMs: 600_000 },
} as const;
export type RangeKey = keyof typeof RANGES;

export const POINTS = 500;

/**
 * Columns for a min/avg/max chart of one metric: [t, avg, min, max], one row
 * per bucket. Several series (GPUs) are folded per timestamp: mean of the
 * averages, min of the minimums, max of the maximums.
 */
export function columnsFor(resp: Pick<HistoryResponse, 'series'> | undefined, metric: HistoryMetric, scale = 1): (number | null)[][] {
  const rows = new Map<number, { avg: number[]; min: number[]; max: number[] }>();
  const num = (p: HistoryPoint, k: string) => {
    const v = (p as Record<string, unknown>)[`${metric}_${k}`];
    return typeof v === 'number' ? v * scale : null;
  };
  for (const s of resp?.series ?? []) {
    for (const p of s.points ?? []) {
      const t = Date.parse(p.t) / 1000;
      const r = rows.get(t) ?? { avg: [], min: [], max: [] };
      for (const k of ['avg', 'min', 'max'] as const) {
        const v = num(p, k);
        if (v != null) r[k].push(v);
      }
      rows.set(t, r);
    }
  }
  const ts = [...rows.keys()].sort((a, b) => a - b);
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
  return [
    ts,
    ts.map((t) => mean(rows.get(t)!.avg)),
    ts.map((t) => (rows.get(t)!.min.length ? Math.min(...rows.get(t)!.min) : null)),
    ts.map((t) => (rows.get(t)!.max.length ? Math.max(...rows.get(t)!.max) : null)),
  ];
}

const KiB = 1024;
const MiB = KiB * 1024;
const GiB = MiB * 1024;
const TiB = GiB * 1024;

/** One binary unit for a whole axis: the largest that keeps the top value >= 1. */
export function byteUnit(maxBytes: number): { div: number; label: string } {
  for (const [div, label] of [[TiB, 'TiB'], [GiB, 'GiB'], [MiB, 'MiB'], [KiB, 'KiB']] as const) {
    if (maxBytes >= div) return { div, label };
  }
  return { div: 1, label: 'B' };
}

/** The largest value in a chart's data columns (x excluded); 0 when there is none. */
export function maxOf(columns: (number | null)[][]): number {
  let m = 0;
  for (const col of columns.slice(1)) for (const v of col) if (v != null && v > m) m = v;
  return m;
}
