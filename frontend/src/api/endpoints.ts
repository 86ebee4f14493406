/** Every server call the dashboard makes, typed; all go through client.ts. */
import { api } from './client';
import type {
  GPUsPublic,
  HistoryResponse,
  HostsPublic,
  RecommendBody,
  RecommendResponse,
  Topology,
  Training,
  TrainingCreate,
  TrainingEvent,
  TrainingLogs,
  TrainingMetric,
  TrainingsPublic,
  ValidateBody,
  ValidateResponse,
} from './types';

export type HistoryMetric = 'utilization' | 'memory_used' | 'temperature' | 'power_draw';

export const endpoints = {
  gpus: (signal?: AbortSignal) => api.get<GPUsPublic>('/system/gpus', undefined, signal),
  hosts: (signal?: AbortSignal) => api.get<HostsPublic>('/system/hosts', undefined, signal),
  topology: (signal?: AbortSignal) => api.get<Topology>('/system/topology', undefined, signal),
  /** `gpu` is host:index (repeatable); `aggregate` folds the GPUs into one series. */
  history: (q: { gpu?: string | string[]; host?: string; aggregate?: boolean; from: string; to: string; points: number }, signal?: AbortSignal) =>
    api.get<HistoryResponse>('/system/metrics/history', q, signal),
  recommend: (body: Partial<RecommendBody> & Pick<RecommendBody, 'recipe' | 'config' | 'count'>) =>
    api.post<RecommendResponse>('/system/gpus/recommend', body),
  validate: (body: Partial<ValidateBody> & Pick<ValidateBody, 'gpu_ids'>) => api.post<ValidateResponse>('/system/gpus/validate', body),

  trainings: (q: { status?: string; owner?: string; limit?: number; offset?: number }, signal?: AbortSignal) =>
    api.get<TrainingsPublic>('/trainings', q, signal),
  training: (id: string, signal?: AbortSignal) => api.get<Training>(`/trainings/${encodeURIComponent(id)}`, undefined, signal),
  createTraining: (body: Partial<TrainingCreate> & Pick<TrainingCreate, 'name' | 'recipe'>) => api.post<Training>('/trainings', body),
  cancelTraining: (id: string) => api.post<Training>(`/trainings/${encodeURIComponent(id)}/cancel`),
  events: (id: string, afterSeq = 0, signal?: AbortSignal) =>
    api.get<{ data: TrainingEvent[]; count: number }>(`/trainings/${encodeURIComponent(id)}/events`, { after_seq: afterSeq }, signal),
  /** The whole curve downsampled to `maxPoints`, or every row after `afterStep`. */
  metrics: (id: string, afterStep = -1, maxPoints = 2000, signal?: AbortSignal) =>
    api.get<{ data: TrainingMetric[]; count: number; total?: number }>(
      `/trainings/${encodeURIComponent(id)}/metrics`,
      { after_step: afterStep, max_points: maxPoints },
      signal,
    ),
  /** From a byte offset, or (offset null) the last `tail` lines. */
  logs: (id: string, offset: number | null, tail = 200, signal?: AbortSignal) =>
    api.get<TrainingLogs>(`/trainings/${encodeURIComponent(id)}/logs`, offset == null ? { tail } : { offset }, signal),
};

/** Lists come as {data: [...]} from most routes; accept a bare array too. */
export function listOf<T>(x: { data: T[] } | T[] | undefined): T[] {
  if (!x) return [];
  return Array.isArray(x) ? x : x.data;
}
