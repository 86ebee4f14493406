import type { SweepCurves, SweepTrial } from '../../api/types';

/** The best trial's line (and green nowhere else): the other trials' hues leave green out. */
export const BEST_COLOR = '#16a34a';
const GOLDEN_ANGLE = 137.508;
const LIGHTNESS = [52, 72, 62];
const DASHES: (number[] | undefined)[] = [undefined, [6, 3], [2, 3]];

/**
 * The i-th trial's line colour. Hues step by the golden angle, which never comes back to a hue it
 * gave, across the 265 degrees that leave the best trial's greens out; a sweep's trials so never share
 * a colour (a fixed palette of ten came round again at the eleventh). Lightness steps in threes, so trials
 * eight apart (whose hues come within 15 degrees) and neighbours differ in it too.
 */
export function colorOf(i: number): string {
  const hue = (180 + ((i * GOLDEN_ANGLE) % 360) * (265 / 360)) % 360;
  return `hsl(${hue.toFixed(1)}, 75%, ${LIGHTNESS[i % LIGHTNESS.length]}%)`;
}

/** The i-th trial's dash pattern (solid, dashed, dotted in turn), so lines of near hues still differ. */
export function dashOf(i: number): number[] | undefined {
  return DASHES[i % DASHES.length];
}

/** How many trials run at once, in words: "all at once" when `parallel` is not below the trial count. */
export function parallelText(total: number, parallel: number): string {
  const trials = `${total} ${total === 1 ? 'trial' : 'trials'}`;
  if (parallel >= total) return total === 1 ? trials : `${trials}, all at once`;
  return `${trials}, ${parallel} at a time`;
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
