import { axisWidth, tickLabel } from '../../components/Chart';
import { describe, expect, it } from 'vitest';
import { history } from '../../test/factories';
import { byteUnit, columnsFor, maxOf } from './history';

const p = (t: string, avg: number, min: number, max: number) => ({ t, samples: 10, utilization_avg: avg, utilization_min: min, utilization_max: max });

describe('columnsFor', () => {
  it('gives [t, avg, min, max] per bucket, oldest first', () => {
    const resp = history([{ host: 'h', gpu_index: 0, points: [p('2026-01-01T00:01:00Z', 50, 10, 90), p('2026-01-01T00:00:00Z', 20, 5, 30)] }]);
    expect(columnsFor(resp, 'utilization')).toEqual([
      [Date.parse('2026-01-01T00:00:00Z') / 1000, Date.parse('2026-01-01T00:01:00Z') / 1000],
      [20, 50],
      [5, 10],
      [30, 90],
    ]);
  });

  it('folds several GPUs per bucket and leaves a missing metric as a gap', () => {
    const t = '2026-01-01T00:00:00Z';
    const resp = history([
      { host: 'h', gpu_index: 0, points: [p(t, 20, 10, 30)] },
      { host: 'h', gpu_index: 1, points: [p(t, 60, 40, 95)] },
    ]);
    expect(columnsFor(resp, 'utilization').slice(1)).toEqual([[40], [10], [95]]);
    expect(columnsFor(resp, 'temperature').slice(1)).toEqual([[null], [null], [null]]);
  });
});

describe('memory axis units', () => {
  it('picks one binary unit for the whole axis from the largest value', () => {
    expect(byteUnit(572 * 2 ** 20)).toEqual({ div: 2 ** 20, label: 'MiB' });
    expect(byteUnit(80 * 2 ** 30)).toEqual({ div: 2 ** 30, label: 'GiB' });
    expect(byteUnit(0)).toEqual({ div: 1, label: 'B' });
    expect(maxOf([[1, 2], [null, 3 * 2 ** 20], [5, null]])).toBe(3 * 2 ** 20);
  });

  it('labels every tick with the same unit, round numbers, zero included', () => {
    const labels = [0, 100, 200, 300, 400, 500, 600].map((v) => tickLabel(v, 'MiB', undefined));
    expect(labels).toEqual(['0 MiB', '100 MiB', '200 MiB', '300 MiB', '400 MiB', '500 MiB', '600 MiB']);
    expect(tickLabel(0.30000000000000004, 'GiB', undefined)).toBe('0.3 GiB');
    // The axis is as wide as its longest label needs: "600 MiB" is not cut to "·00 MiB".
    expect(axisWidth(labels)).toBeGreaterThanOrEqual(7 * 7 + 14);
    expect(axisWidth(['1', '2'])).toBeLessThan(axisWidth(labels));
  });
});
