import type { GPU, Training } from '../api/types';

const GiB = 1024 ** 3;

export function gpu(host: string, index: number, over: Partial<GPU> = {}): GPU {
  return {
    id: `${host}-${index}`,
    host,
    index,
    uuid: `GPU-${host}-${index}`,
    vendor: 'nvidia',
    backend: 'cuda',
    name: 'NVIDIA H100 80GB HBM3',
    pci_bus_id: null,
    memory_total: 80 * GiB,
    compute_capability: '9.0',
    simulated: true,
    status: 'ok',
    status_reason: null,
    drained: false,
    drain_reason: null,
    live: {
      timestamp: '2026-11-21T10:00:00Z',
      utilization: 10 * index,
      memory_used: 4 * GiB,
      memory_total: 80 * GiB,
      memory_free: 76 * GiB,
      temperature: 40 + index,
      power_draw: 100,
      power_limit: 700,
      processes: [],
    },
    availability: { state: 'free', reason: 'free: 76.0 GiB available', free_memory: 76 * GiB, holders: [] },
    ...over,
  };
}

export function training(over: Partial<Training> = {}): Training {
  return {
    id: '3f1c2a4e-0000-4000-8000-000000000001',
    name: 'sae-run',
    owner: 'alice',
    recipe: 'sae',
    config: {},
    status: 'running',
    gpu_ids: [0, 1],
    host_name: 'sim-host',
    world_size: 2,
    distributed: true,
    step: 50,
    max_steps: 100,
    last_loss: 0.5,
    created_at: '2026-11-21T10:00:00Z',
    started_at: '2026-11-21T10:00:01Z',
    finished_at: null,
    ...over,
  };
}
