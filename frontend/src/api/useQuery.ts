import { useCallback, useEffect, useRef, useState } from 'react';
import { ApiError } from './client';

/** A refresh that failed is tried again this soon (or at its interval, if shorter): a page whose first
 * load met a passing error does not sit on that error for a whole refresh interval. */
export const ERROR_RETRY_MS = 5000;

export interface QueryState<T> {
  data: T | undefined;
  error: ApiError | null;
  loading: boolean;
  reload: () => void;
}

/**
 * Fetch `key` with `fetcher`, again every `intervalMs` when given. The last
 * good answer stays on screen while a refresh fails, with the error beside it.
 * A failed fetch is tried again after `ERROR_RETRY_MS` at most. A null key fetches nothing.
 */
export function useQuery<T>(
  key: string | null,
  fetcher: (signal: AbortSignal) => Promise<T>,
  intervalMs?: number,
): QueryState<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<ApiError | null>(null);
  const [loading, setLoading] = useState<boolean>(key !== null);
  const [tick, setTick] = useState(0);
  const fetchRef = useRef(fetcher);
  fetchRef.current = fetcher;

  useEffect(() => {
    setData(undefined);
    setError(null);
  }, [key]);

  useEffect(() => {
    if (key === null) {
      setLoading(false);
      return;
    }
    const ctrl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | null = null;
    const run = async () => {
      let failed = false;
      try {
        const d = await fetchRef.current(ctrl.signal);
        if (ctrl.signal.aborted) return;
        setData(d);
        setError(null);
      } catch (e) {
        if (ctrl.signal.aborted || (e as Error).name === 'AbortError') return;
        failed = true;
        setError(e instanceof ApiError ? e : new ApiError(0, String(e)));
      } finally {
        if (!ctrl.signal.aborted) {
          setLoading(false);
          if (intervalMs) timer = setTimeout(run, failed ? Math.min(intervalMs, ERROR_RETRY_MS) : intervalMs);
        }
      }
    };
    setLoading(true);
    void run();
    return () => {
      ctrl.abort();
      if (timer) clearTimeout(timer);
    };
  }, [key, intervalMs, tick]);

  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { data, error, loading, reload };
}
