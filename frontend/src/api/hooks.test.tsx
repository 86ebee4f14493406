import { act, renderHook, waitFor } from '@testing-library/react';
import { describe, expect, it, vi } from 'vitest';
import { MINI_POINTS, useGpuStream } from '../pages/fleet/useGpuStream';
import { installFakeLive } from '../test/fakeSocket';
import { ApiError } from './client';
import { useChannel } from './useLive';
import { ERROR_RETRY_MS, useQuery } from './useQuery';

describe('useQuery', () => {
  it('keeps the last good answer on screen when a refresh fails, with the error beside it', async () => {
    const fetcher = vi.fn().mockResolvedValueOnce({ n: 1 }).mockRejectedValueOnce(new ApiError(0, 'unreachable'));
    const { result } = renderHook(() => useQuery('k', fetcher));
    await waitFor(() => expect(result.current.data).toEqual({ n: 1 }));
    act(() => result.current.reload());
    await waitFor(() => expect(result.current.error?.message).toBe('unreachable'));
    expect(result.current.data).toEqual({ n: 1 });
  });

  it('tries a failed first load again soon, not a whole refresh interval later', async () => {
    vi.useFakeTimers();
    try {
      const fetcher = vi.fn().mockRejectedValueOnce(new ApiError(503, 'away')).mockResolvedValue({ n: 2 });
      const { result } = renderHook(() => useQuery('k', fetcher, 60_000));
      await act(async () => {
        await vi.advanceTimersByTimeAsync(0);
      });
      expect(result.current.error?.message).toBe('away');
      await act(async () => {
        await vi.advanceTimersByTimeAsync(ERROR_RETRY_MS);
      });
      expect(fetcher).toHaveBeenCalledTimes(2);
      expect(result.current.data).toEqual({ n: 2 });
      expect(result.current.error).toBeNull();
      // Once it answers, it refreshes at its own interval again.
      await act(async () => {
        await vi.advanceTimersByTimeAsync(ERROR_RETRY_MS * 2);
      });
      expect(fetcher).toHaveBeenCalledTimes(2);
    } finally {
      vi.useRealTimers();
    }
  });

  it('fetches nothing for a null key and aborts when the key changes', async () => {
    const seen: AbortSignal[] = [];
    const fetcher = vi.fn((signal: AbortSignal) => {
      seen.push(signal);
      return new Promise<never>(() => undefined);
    });
    const { rerender } = renderHook(({ k }) => useQuery(k, fetcher), { initialProps: { k: null as string | null } });
    expect(fetcher).not.toHaveBeenCalled();
    rerender({ k: 'a' });
    rerender({ k: 'b' });
    expect(fetcher).toHaveBeenCalledTimes(2);
    expect(seen[0].aborted).toBe(true);
    expect(seen[1].aborted).toBe(false);
  });
});

describe('useChannel', () => {
  it('subscribes only while enabled', () => {
    const { client } = installFakeLive();
    const { rerender, unmount } = renderHook(({ on }) => useChannel('gpu:h:0', () => undefined, on), { initialProps: { on: false } });
    expect(client.channels()).toEqual([]);
    rerender({ on: true });
    expect(client.channels()).toEqual(['gpu:h:0']);
    rerender({ on: false });
    expect(client.channels()).toEqual([]);
    rerender({ on: true });
    unmount();
    expect(client.channels()).toEqual([]);
  });
});

describe('useGpuStream', () => {
  it('follows its GPU channel and keeps a bounded window of samples', () => {
    const { sockets } = installFakeLive();
    const { result } = renderHook(() => useGpuStream('h', 2, null, true));
    act(() => sockets[0].open());
    act(() => {
      for (let i = 0; i < MINI_POINTS + 50; i++) {
        sockets[0].push({
          type: 'update',
          channel: 'gpu:h:2',
          seq: i + 1,
          data: { timestamp: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(), utilization: i % 100, memory_used: 1, memory_total: 4 },
        });
      }
    });
    expect(result.current.live?.utilization).toBe((MINI_POINTS + 49) % 100);
    expect(result.current.util.length).toBe(MINI_POINTS);
    expect(result.current.mem.last()).toBe(25);
  });
});
