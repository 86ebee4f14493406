/** Every server call the dashboard makes, typed; all go through client.ts. */
import { api } from './client';
import type {
  GPUsPublic,
  HostsPublic,
  RecommendResponse,
  Topology,
  Training,
  TrainingEvent,
  TrainingLogs,
  TrainingMetric,
  TrainingsPublic,
  ValidateResponse,
} from './types';

/** One bucket of the history endpoint: min/avg/max per metric. */
export interface HistoryPoint {
  t: string;
  samples: number;
  [field: string]: number | string | null;
}

export type HistoryMetric = 'utilization' | 'memory_used' | 'temperature' | 'power_draw';

export interface HistorySeries {
  host: string | null;
  gpu_index: number | null;
  points: HistoryPoint[];
}

export interface HistoryResponse {
  start?: string;
  end?: string;
  step_s?: number;
  aggregate?: boolean;
  series: HistorySeries[];
}

export interface TrainingCreate {
  name: string;
  recipe: string;
  config: Record<string, unknown>;
  gpu_ids?: number[] | null;
  host?: string | null;
  distributed?: boolean;
  priority?: number;
}

export const endpoints = {
  gpus: (signal?: AbortSignal) => api.get<GPUsPublic>('/system/gpus', undefined, signal),
  hosts: (signal?: AbortSignal) => api.get<HostsPublic>('/system/hosts', undefined, signal),
  topology: (signal?: AbortSignal) => api.get<Topology>('/system/topology', undefined, signal),
  /** `gpu` is host:index (repeatable); `aggregate` folds the GPUs into one series. */
  history: (q: { gpu?: string | string[]; host?: string; aggregate?: boolean; from: string; to: string; points: number }, signal?: AbortSignal) =>
    api.get<HistoryResponse>('/system/metrics/history', q, signal),
  recommend: (body: { recipe: string; config: Record<string, unknown>; count: number; host?: string | null }) =>
    api.post<RecommendResponse>('/system/gpus/recommend', body),
  validate: (body: { gpu_ids: number[]; host: string; recipe: string; config: Record<string, unknown> }) =>
    api.post<ValidateResponse>('/system/gpus/validate', body),

  trainings: (q: { status?: string; owner?: string; limit?: number; offset?: number }, signal?: AbortSignal) =>
    api.get<TrainingsPublic>('/trainings', q, signal),
  training: (id: string, signal?: AbortSignal) => api.get<Training>(`/trainings/${encodeURIComponent(id)}`, undefined, signal),
  createTraining: (body: TrainingCreate) => api.post<Training>('/trainings', body),
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
