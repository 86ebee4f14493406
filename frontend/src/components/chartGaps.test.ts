import { describe, expect, it } from 'vitest';
import { breaks, ownPointsOnly, typicalStep, withGaps } from './chartGaps';

describe('withGaps', () => {
  it('puts a null row inside a stretch with no samples, so the line breaks there', () => {
    // Samples every 10 s, then the server is down from t=30 to t=600.
    const xs = [0, 10, 20, 30, 600, 610, 620];
    const util = [5, 6, 7, 8, 50, 51, 52];
    const [x, y] = withGaps([xs, util]);
    expect(x).toEqual([0, 10, 20, 30, 40, 600, 610, 620]);
    expect(y).toEqual([5, 6, 7, 8, null, 50, 51, 52]);
  });

  it('leaves evenly sampled data and small jitter alone', () => {
    const data = [[0, 10, 21, 30, 45, 50], [1, 2, 3, 4, 5, 6]];
    expect(withGaps(data)).toBe(data);
    expect(typicalStep([0, 10, 21, 30])).toBe(10);
  });

  it('breaks every series at every gap', () => {
    const out = withGaps([[0, 1, 2, 100, 101, 200], [1, 1, 1, 1, 1, 1], [2, 2, 2, 2, 2, 2]]);
    expect(out[0]).toEqual([0, 1, 2, 3, 100, 101, 102, 200]);
    expect(out[1].filter((v) => v === null).length).toBe(2);
    expect(out[2].filter((v) => v === null).length).toBe(2);
  });
});

describe('ownPointsOnly', () => {
  it('turns the steps a series lacks into values uPlot skips, leaving x and the points alone', () => {
    const data = [[1, 2, 3], [1.0, null, 0.5], [null, 0.4, null]];
    expect(ownPointsOnly(data)).toEqual([[1, 2, 3], [1.0, undefined, 0.5], [undefined, 0.4, undefined]]);
    expect(breaks(data)).toBe(3);
    expect(breaks(ownPointsOnly(data))).toBe(0);
    const full = [[1, 2], [3, 4]];
    expect(ownPointsOnly(full)).toBe(full);
  });
});
