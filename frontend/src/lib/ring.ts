/**
 * A fixed-capacity time series: the newest `capacity` points, in columns that
 * uPlot draws directly. A dashboard tab left open for a day keeps the same
 * memory as one opened a minute ago.
 */
export class Ring {
  readonly capacity: number;
  private xs: Float64Array;
  private ys: Float64Array;
  private start = 0;
  private len = 0;

  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new Error('capacity must be a positive integer');
    this.capacity = capacity;
    this.xs = new Float64Array(capacity);
    this.ys = new Float64Array(capacity);
  }

  get length(): number {
    return this.len;
  }

  /** Append (x, y); a point older than the newest one is ignored (replayed updates). */
  push(x: number, y: number | null | undefined): void {
    if (this.len > 0 && x <= this.lastX()) return;
    const v = y == null ? NaN : y;
    if (this.len < this.capacity) {
      const i = (this.start + this.len) % this.capacity;
      this.xs[i] = x;
      this.ys[i] = v;
      this.len += 1;
    } else {
      this.xs[this.start] = x;
      this.ys[this.start] = v;
      this.start = (this.start + 1) % this.capacity;
    }
  }

  /**
   * Add older points (e.g. stored history fetched after the live stream
   * started): everything is re-sorted by x, duplicates dropped, newest kept.
   */
  backfill(points: [number, number | null][]): void {
    const [xs, ys] = this.columns();
    const byX = new Map<number, number | null>();
    points.forEach(([x, y]) => byX.set(x, y));
    xs.forEach((x, i) => byX.set(x, ys[i]));
    const sorted = [...byX.entries()].sort((a, b) => a[0] - b[0]);
    this.start = 0;
    this.len = 0;
    for (const [x, y] of sorted) this.push(x, y);
  }

  lastX(): number {
    return this.len === 0 ? -Infinity : this.xs[(this.start + this.len - 1) % this.capacity];
  }

  last(): number | null {
    if (this.len === 0) return null;
    const v = this.ys[(this.start + this.len - 1) % this.capacity];
    return Number.isNaN(v) ? null : v;
  }

  /** Oldest-first copies, with gaps (NaN) as null so charts break the line there. */
  columns(): [number[], (number | null)[]] {
    const x: number[] = new Array(this.len);
    const y: (number | null)[] = new Array(this.len);
    for (let k = 0; k < this.len; k++) {
      const i = (this.start + k) % this.capacity;
      x[k] = this.xs[i];
      y[k] = Number.isNaN(this.ys[i]) ? null : this.ys[i];
    }
    return [x, y];
  }
}
