import type { HistoryMetric, HistoryPoint, HistoryResponse } from '../../api/endpoints';

export const RANGES = {
  '1h': { label: 'Last hour', seconds: 3600 },
  '24h': { label: 'Last day', seconds: 86400 },
  '7d': { label: 'Last week', seconds: 7 * 86400 },
} as const;
export type RangeKey = keyof typeof RANGES;

export const POINTS = 500;

/**
 * Columns for a min/avg/max chart of one metric: [t, avg, min, max], one
 * row per bucket. Buckets of several series (aggregate over GPUs) are
 * averaged per timestamp.
 */
export function columnsFor(resp: HistoryResponse | undefined, metric: HistoryMetric, scale = 1): (number | null)[][] {
  const rows = new Map<number, { avg: number[]; min: number[]; max: number[] }>();
  for (const s of resp?.series ?? []) {
    for (const p of (s.metrics[metric] ?? []) as HistoryPoint[]) {
      const t = Date.parse(p.t) / 1000;
      const r = rows.get(t) ?? { avg: [], min: [], max: [] };
      if (p.avg != null) r.avg.push(p.avg * scale);
      if (p.min != null) r.min.push(p.min * scale);
      if (p.max != null) r.max.push(p.max * scale);
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
