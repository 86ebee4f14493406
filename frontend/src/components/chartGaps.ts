/**
 * Breaks in a time series. A server that was down leaves no samples for a
 * while; uPlot joins the points on both sides with a straight line unless a
 * null lies between them (it draws gaps for nulls, `spanGaps` being off).
 */

/** The typical spacing of x: the median of its steps. */
export function typicalStep(xs: (number | null)[]): number | null {
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
export function withGaps(data: (number | null)[][], factor = 4): (number | null)[][] {
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
    const out: (number | null)[] = [];
    let from = 0;
    for (const i of breaks) {
      out.push(...col.slice(from, i), c === 0 ? (xs[i - 1] as number) + step : null);
      from = i;
    }
    out.push(...col.slice(from));
    return out;
  });
}
