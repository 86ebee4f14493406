import type { Aggregated, GPULive } from '../../api/types';

/**
 * The seed's AggregatedMetrics computed from GPUs' newest samples, used until
 * the live `aggregate` channel answers. A lost GPU or a missing field does not
 * count (no division by zero, no max over nulls).
 */
export function aggregate(samples: (Partial<GPULive> | null | undefined)[]): Aggregated {
  const live = samples.filter((s): s is Partial<GPULive> => !!s && !s.lost);
  const utils = live.map((s) => s.utilization).filter((v): v is number => v != null);
  const temps = live.map((s) => s.temperature).filter((v): v is number => v != null);
  const powers = live.map((s) => s.power_draw).filter((v): v is number => v != null);
  return {
    total_memory_used: live.reduce((a, s) => a + (s.memory_used ?? 0), 0),
    total_memory_total: live.reduce((a, s) => a + (s.memory_total ?? 0), 0),
    average_utilization: utils.length ? utils.reduce((a, b) => a + b, 0) / utils.length : null,
    max_temperature: temps.length ? Math.max(...temps) : null,
    total_power_draw: powers.length ? powers.reduce((a, b) => a + b, 0) : null,
    gpu_count: samples.length,
    reporting_count: live.length,
    lost_count: samples.length - live.length,
  };
}

/** A live aggregate message: the metrics themselves, or wrapped with per-host figures. */
export function aggregateOf(data: unknown): { fleet: Aggregated | null; hosts: Record<string, Aggregated> } {
  if (!data || typeof data !== 'object') return { fleet: null, hosts: {} };
  const d = data as { fleet?: Aggregated; aggregate?: Aggregated; hosts?: Record<string, Aggregated> };
  const fleet = d.fleet ?? d.aggregate ?? ('gpu_count' in d ? (data as Aggregated) : null);
  return { fleet, hosts: d.hosts ?? {} };
}
