/**
 * Usage rows (one per day and user or group) shaped for the table and the
 * stacked chart: every day of the range, every name, hours per cell.
 */
import type { UsageRow } from '../../api/types';

export type Measure = 'held' | 'used';

export interface UsageGrid {
  /** Every UTC day of the range, oldest first (days with no use included). */
  days: string[];
  /** Names by total hours, largest first, so the biggest user sits at the bottom of each bar. */
  names: string[];
  /** hours[name][dayIndex] */
  hours: Record<string, number[]>;
  /** Total hours per day. */
  totals: number[];
  /** Total hours per name over the range. */
  byName: Record<string, number>;
}

export const RANGE_DAYS = { 7: 'Last 7 days', 30: 'Last 30 days', 90: 'Last 90 days' } as const;
export type RangeDays = keyof typeof RANGE_DAYS;

const PALETTE = ['#4fb3ff', '#f5b945', '#7bd389', '#e57373', '#b39ddb', '#4dd0e1', '#ffb74d', '#a1887f', '#90a4ae', '#f06292'];

export function colorOf(index: number): string {
  return PALETTE[index % PALETTE.length];
}

/** YYYY-MM-DD of a Date in UTC. */
export function isoDay(d: Date): string {
  return d.toISOString().slice(0, 10);
}

/** The `from`..`to` days (inclusive) of the last `days` UTC days ending today. */
export function rangeOf(days: number, now: Date = new Date()): { from: string; to: string } {
  const from = new Date(now.getTime() - (days - 1) * 86400_000);
  return { from: isoDay(from), to: isoDay(now) };
}

export function daysBetween(from: string, to: string): string[] {
  const out: string[] = [];
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= Date.parse(`${to}T00:00:00Z`); t += 86400_000) {
    out.push(isoDay(new Date(t)));
  }
  return out;
}

export function toGrid(rows: UsageRow[], from: string, to: string, measure: Measure): UsageGrid {
  const days = daysBetween(from, to);
  const at = new Map(days.map((d, i) => [d, i]));
  const hours: Record<string, number[]> = {};
  for (const r of rows) {
    const i = at.get(r.day);
    if (i === undefined) continue;
    (hours[r.name] ??= days.map(() => 0))[i] += measure === 'held' ? r.gpu_hours_held : r.gpu_hours_used;
  }
  const byName: Record<string, number> = {};
  for (const [n, hs] of Object.entries(hours)) byName[n] = hs.reduce((a, b) => a + b, 0);
  const names = Object.keys(hours).sort((a, b) => byName[b] - byName[a] || a.localeCompare(b));
  const totals = days.map((_, i) => names.reduce((s, n) => s + hours[n][i], 0));
  return { days, names, hours, totals, byName };
}

export function fmtHours(h: number): string {
  if (h === 0) return '0';
  if (h < 0.1) return h.toFixed(3);
  if (h < 10) return h.toFixed(2);
  return h.toFixed(1);
}
