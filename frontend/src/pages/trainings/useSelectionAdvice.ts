import { useEffect, useState } from 'react';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import type { Candidate, RecommendResponse, ValidateResponse, ValidationProblem } from '../../api/types';
import { useDebounced } from '../../lib/useDebounced';
import type { Selection } from './GpuSelector';

export interface Advice {
  needBytes: number | null;
  estimateNote: string | null;
  candidates: Candidate[];
  refused: string | null;
  waitReason: string | null;
  problems: ValidationProblem[];
  warnings: ValidationProblem[];
  adviceError: string | null;
}

/** The per-rank memory need a recommendation reports, whichever field carries it. */
export function needOf(r: RecommendResponse | null): number | null {
  if (!r) return null;
  return r.estimate?.total ?? r.memory_bytes ?? null;
}

/**
 * Ask the server, as the form changes, what this config needs (the estimate),
 * which GPU sets it recommends, and what is wrong with the chosen set. Both
 * calls are debounced; a config with field errors asks nothing.
 */
export function useSelectionAdvice(recipe: string, config: Record<string, unknown> | null, count: number, selection: Selection): Advice {
  const cfgKey = useDebounced(config ? JSON.stringify({ recipe, config, count }) : null, 350);
  const selKey = useDebounced(config && selection.host && selection.indexes.length ? JSON.stringify({ recipe, config, selection }) : null, 250);
  const [rec, setRec] = useState<RecommendResponse | null>(null);
  const [val, setVal] = useState<Pick<ValidateResponse, 'ok' | 'problems' | 'warnings'> | null>(null);
  const [err, setErr] = useState<string | null>(null);
  const [refused, setRefused] = useState<string | null>(null);

  useEffect(() => {
    if (!cfgKey) return;
    let live = true;
    const { recipe: r, config: c, count: n } = JSON.parse(cfgKey);
    endpoints
      .recommend({ recipe: r, config: c, count: n })
      .then((res) => live && (setRec(res), setErr(null), setRefused(null)))
      .catch((e: ApiError) => {
        if (!live) return;
        setRec(null);
        // 422 here means the request can never be placed (or the config is refused): say why.
        if (e.status === 422) (setRefused(e.message), setErr(null));
        else (setErr(e.message), setRefused(null));
      });
    return () => {
      live = false;
    };
  }, [cfgKey]);

  useEffect(() => {
    if (!selKey) {
      setVal(null);
      return;
    }
    let live = true;
    const { recipe: r, config: c, selection: s } = JSON.parse(selKey);
    endpoints
      .validate({ recipe: r, config: c, host: s.host, gpu_ids: s.indexes })
      .then((res) => live && setVal(res))
      .catch((e: ApiError) => live && setVal({ ok: false, problems: [{ code: 'error', message: e.message }], warnings: [] }));
    return () => {
      live = false;
    };
  }, [selKey]);

  return {
    needBytes: needOf(rec),
    estimateNote: rec?.estimate?.summary ?? null,
    candidates: rec?.candidates ?? [],
    refused,
    waitReason: rec?.wait_reason ?? null,
    problems: val?.problems ?? [],
    warnings: val?.warnings ?? [],
    adviceError: err,
  };
}
