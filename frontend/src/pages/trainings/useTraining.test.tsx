import { act, renderHook, waitFor } from '@testing-library/react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { endpoints } from '../../api/endpoints';
import type { TrainingMetric } from '../../api/types';
import { installFakeLive } from '../../test/fakeSocket';
import { metric, training } from '../../test/factories';
import { mergeMetrics, useTraining } from './useTraining';

function steps(from: number, to: number): TrainingMetric[] {
  return Array.from({ length: to - from + 1 }, (_, i) => metric(from + i, 1 / (from + i)));
}

afterEach(() => vi.restoreAllMocks());

describe('mergeMetrics', () => {
  it('is the union by step of both sides, ordered by step, whatever arrives first', () => {
    const live = steps(801, 1000);
    const rest = steps(1, 1000).filter((m) => m.step % 2 === 1 || m.step > 800);
    const a = mergeMetrics(live, rest);
    const b = mergeMetrics(rest, live);
    expect(a.map((m) => m.step)).toEqual(b.map((m) => m.step));
    expect(a[0].step).toBe(1);
    expect(a[a.length - 1].step).toBe(1000);
    expect(new Set(a.map((m) => m.step)).size).toBe(a.length);
    expect(a.every((m, i) => i === 0 || m.step > a[i - 1].step)).toBe(true);
  });

  it('appends new live rows to the end', () => {
    const out = mergeMetrics(steps(1, 10), steps(11, 12));
    expect(out.map((m) => m.step)).toEqual(steps(1, 12).map((m) => m.step));
  });
});

describe('useTraining', () => {
  it('keeps the REST history when the socket snapshot arrives first', async () => {
    const { sockets } = installFakeLive();
    const t = training();
    let answer: (page: { data: TrainingMetric[] }) => void = () => undefined;
    vi.spyOn(endpoints, 'training').mockResolvedValue(t);
    vi.spyOn(endpoints, 'events').mockResolvedValue({ data: [] } as never);
    const rest = vi.spyOn(endpoints, 'metrics').mockReturnValue(new Promise((ok) => (answer = ok)) as never);
    const { result } = renderHook(() => useTraining(t.id));
    act(() => sockets[0].open());
    // The snapshot carries the newest 200 rows; the REST reply (the whole curve) is still on its way.
    act(() => sockets[0].push({ type: 'snapshot', channel: `training:${t.id}`, seq: 1, data: { metrics: steps(801, 1000) } }));
    expect(result.current.metrics.length).toBe(200);
    await act(async () => answer({ data: steps(1, 1000) }));
    await waitFor(() => expect(result.current.metrics.length).toBe(1000));
    expect(result.current.metrics[0].step).toBe(1);
    expect(rest.mock.calls[0][1]).toBe(-1);
  });
});
