import type { SweepCurves, SweepTrial } from '../../api/types';

/** Every trial's line; green is kept for the best one. */
const PALETTE = ['#2563eb', '#dc2626', '#0891b2', '#9333ea', '#ea580c', '#a16207', '#ca8a04', '#db2777', '#4b5563', '#65a30d'];

export function colorOf(i: number): string {
  return PALETTE[i % PALETTE.length];
}

/** The trials' curves on one step axis: [steps, ...one column per trial (null where it has no point)]. */
export function overlay(curves: SweepCurves): { numbers: number[]; data: (number | null)[][] } {
  const withPoints = curves.data.filter((c) => c.points.length > 0);
  const steps = [...new Set(withPoints.flatMap((c) => c.points.map((p) => p[0])))].sort((a, b) => a - b);
  const index = new Map(steps.map((s, i) => [s, i]));
  const columns = withPoints.map((c) => {
    const col: (number | null)[] = steps.map(() => null);
    for (const [step, v] of c.points) col[index.get(step)!] = v;
    return col;
  });
  return { numbers: withPoints.map((c) => c.number), data: [steps, ...columns] };
}

/** The rung as the trial's reason numbers it: the one that stopped it or where it waits; running, the next one. */
export function rungText(t: SweepTrial): string {
  if (t.rung == null) return '–';
  return t.state === 'running' ? `next ${t.rung}` : String(t.rung);
}

/** The parameter names of the trials, in the order the first trial has them. */
export function paramNames(trials: SweepTrial[]): string[] {
  return trials.length ? Object.keys(trials[0].params) : [];
}

export function paramText(v: unknown): string {
  if (typeof v === 'number') return Number(v.toPrecision(4)).toString();
  return typeof v === 'string' ? v : JSON.stringify(v);
}

export interface ScatterPoint {
  number: number;
  x: number;
  y: number;
  label: string;
  state: string;
}

/**
 * One point per trial with a metric: x is the parameter's value (numbers), or
 * the position of its value among the distinct ones (lists, words).
 */
export function scatter(trials: SweepTrial[], param: string): { points: ScatterPoint[]; ticks: string[] | null; log: boolean } {
  const scored = trials.filter((t) => t.metric != null);
  const values = scored.map((t) => t.params[param]);
  const numeric = values.every((v) => typeof v === 'number');
  const ticks = numeric ? null : [...new Set(values.map(paramText))];
  const points = scored.map((t) => ({
    number: t.number,
    x: numeric ? (t.params[param] as number) : ticks!.indexOf(paramText(t.params[param])),
    y: t.metric as number,
    label: paramText(t.params[param]),
    state: t.state,
  }));
  const xs = points.map((p) => p.x);
  const log = numeric && xs.length > 1 && Math.min(...xs) > 0 && Math.max(...xs) / Math.min(...xs) >= 50;
  return { points, ticks, log };
}
