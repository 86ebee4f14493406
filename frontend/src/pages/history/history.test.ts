import { describe, expect, it } from 'vitest';
import { history } from '../../test/factories';
import { columnsFor } from './history';

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
