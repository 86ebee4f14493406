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

interface Answer<T> {
  key: string;
  value: T;
}

/** What the recommendation call answered: the advice, or why there is none. */
interface RecAnswer {
  rec: RecommendResponse | null;
  err: string | null;
  refused: string | null;
}

/**
 * Ask the server, as the form changes, what this config needs (the estimate),
 * which GPU sets it recommends, and what is wrong with the chosen set. Both
 * calls are debounced; a config with field errors asks nothing. Each answer is
 * kept with the form state it was asked for and shown only while the form
 * still says that: a config changed since shows "estimating", never the old
 * figure, and a superseded request's late answer is dropped.
 */
export function useSelectionAdvice(recipe: string, config: Record<string, unknown> | null, count: number, selection: Selection): Advice {
  const cfgNow = config ? JSON.stringify({ recipe, config, count }) : null;
  const selNow = config && selection.host && selection.indexes.length ? JSON.stringify({ recipe, config, selection }) : null;
  const cfgKey = useDebounced(cfgNow, 350);
  const selKey = useDebounced(selNow, 250);
  const [recAnswer, setRecAnswer] = useState<Answer<RecAnswer> | null>(null);
  const [valAnswer, setValAnswer] = useState<Answer<Pick<ValidateResponse, 'ok' | 'problems' | 'warnings'>> | null>(null);

  useEffect(() => {
    if (!cfgKey) return;
    let live = true;
    const { recipe: r, config: c, count: n } = JSON.parse(cfgKey);
    const answer = (value: RecAnswer) => live && setRecAnswer({ key: cfgKey, value });
    endpoints
      .recommend({ recipe: r, config: c, count: n })
      .then((rec) => answer({ rec, err: null, refused: null }))
      // 422 here means the request can never be placed (or the config is refused): say why.
      .catch((e: ApiError) => answer(e.status === 422 ? { rec: null, err: null, refused: e.message } : { rec: null, err: e.message, refused: null }));
    return () => {
      live = false;
    };
  }, [cfgKey]);

  useEffect(() => {
    if (!selKey) return;
    let live = true;
    const { recipe: r, config: c, selection: s } = JSON.parse(selKey);
    const answer = (value: Pick<ValidateResponse, 'ok' | 'problems' | 'warnings'>) => live && setValAnswer({ key: selKey, value });
    endpoints
      .validate({ recipe: r, config: c, host: s.host, gpu_ids: s.indexes })
      .then(answer)
      .catch((e: ApiError) => answer({ ok: false, problems: [{ code: 'error', message: e.message }], warnings: [] }));
    return () => {
      live = false;
    };
  }, [selKey]);

  const cur = recAnswer && recAnswer.key === cfgNow ? recAnswer.value : null;
  const val = valAnswer && valAnswer.key === selNow ? valAnswer.value : null;
  return {
    needBytes: needOf(cur?.rec ?? null),
    estimateNote: cur?.rec?.estimate?.summary ?? null,
    candidates: cur?.rec?.candidates ?? [],
    refused: cur?.refused ?? null,
    waitReason: cur?.rec?.wait_reason ?? null,
    problems: val?.problems ?? [],
    warnings: val?.warnings ?? [],
    adviceError: cur?.err ?? null,
  };
}
