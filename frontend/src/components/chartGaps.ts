/**
 * Breaks in a chart's lines. A server that was down leaves no samples for a
 * while; uPlot joins the points on both sides with a straight line unless a
 * null lies between them (it draws gaps for nulls, `spanGaps` being off). An
 * `undefined` value it skips: the line joins the points on either side.
 */

export type Column = (number | null | undefined)[];

/** The typical spacing of x: the median of its steps. */
export function typicalStep(xs: Column): number | null {
  const steps: number[] = [];
  for (let i = 1; i < xs.length; i++) {
    const a = xs[i - 1];
    const b = xs[i];
    if (a != null && b != null && b > a) steps.push(b - a);
  }
  if (steps.length === 0) return null;
  steps.sort((p, q) => p - q);
  return steps[Math.floor(steps.length / 2)];
}

/**
 * The same columns with a row of nulls inside every gap wider than `factor`
 * typical steps, so the chart shows the outage as a hole, not a diagonal line.
 * Returns the input itself when there is no such gap.
 */
export function withGaps(data: Column[], factor = 4): Column[] {
  const xs = data[0] ?? [];
  const step = typicalStep(xs);
  if (step == null) return data;
  const limit = step * factor;
  const breaks: number[] = [];
  for (let i = 1; i < xs.length; i++) {
    const a = xs[i - 1];
    const b = xs[i];
    if (a != null && b != null && b - a > limit) breaks.push(i);
  }
  if (breaks.length === 0) return data;
  return data.map((col, c) => {
    const out: Column = [];
    let from = 0;
    for (const i of breaks) {
      out.push(...col.slice(from, i), c === 0 ? (xs[i - 1] as number) + step : null);
      from = i;
    }
    out.push(...col.slice(from));
    return out;
  });
}

/**
 * Series over steps share one x column, but each has points only at its own
 * steps (a sweep's trials report where they do): every null in a series
 * becomes undefined, so its line joins its own neighbouring points instead of
 * breaking wherever another series has a point that it lacks.
 */
export function ownPointsOnly(data: Column[]): Column[] {
  if (!data.slice(1).some((col) => col.includes(null))) return data;
  return data.map((col, c) => (c === 0 ? col : col.map((v) => (v === null ? undefined : v))));
}

/** How many breaks uPlot draws in the lines: the nulls among the series' values. */
export function breaks(data: Column[]): number {
  return data.slice(1).reduce((n, col) => n + col.filter((v) => v === null).length, 0);
}
