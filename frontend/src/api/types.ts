/**
 * The shapes the dashboard reads, named after the server's response models.
 * Where the generated schema (schema.d.ts, from the server's OpenAPI document)
 * has a model, the type is taken from it, so a server change that breaks the
 * dashboard breaks `tsc` first.
 */

export interface GPUProcess {
  pid: number;
  user?: string | null;
  command?: string | null;
  used_memory?: number | null;
  training_id?: string | null;
  foreign?: boolean;
}

export interface GPULive {
  timestamp?: string | null;
  utilization?: number | null;
  memory_util?: number | null;
  memory_used?: number | null;
  memory_free?: number | null;
  memory_total?: number | null;
  temperature?: number | null;
  power_draw?: number | null;
  power_limit?: number | null;
  sm_clock?: number | null;
  mem_clock?: number | null;
  lost?: boolean;
  processes?: GPUProcess[];
}

export interface GPUAvailability {
  state: string;
  reason: string;
  free_memory?: number | null;
  holders?: Record<string, unknown>[];
}

export interface GPU {
  id: string;
  host: string;
  index: number;
  uuid: string | null;
  vendor: string;
  backend: string;
  name: string;
  pci_bus_id: string | null;
  memory_total: number | null;
  compute_capability: string | null;
  simulated: boolean;
  status: string;
  status_reason: string | null;
  drained: boolean;
  drain_reason: string | null;
  live?: GPULive | null;
  availability?: GPUAvailability | null;
}

export interface GPUsPublic {
  data: GPU[];
  count: number;
  simulated: boolean;
}

export interface Host {
  id: string;
  name: string;
  address: string | null;
  status: string;
  agent_version: string | null;
  simulated: boolean;
  last_heartbeat: string | null;
  gpu_count: number;
}

export interface HostsPublic {
  data: Host[];
  count: number;
}

export interface LinkPublic {
  gpu_a: number;
  gpu_b: number;
  nvlink_count: number;
  pcie_level: string | null;
  peer_access: boolean;
}

export interface HostTopology {
  host: string;
  gpus: number[];
  links: LinkPublic[];
  matrix: string[][];
}

export interface Topology {
  hosts: HostTopology[];
}

/** The seed's AggregatedMetrics, as the telemetry stream and history send it. */
export interface Aggregated {
  total_memory_used: number;
  total_memory_total: number;
  average_utilization: number | null;
  max_temperature: number | null;
  total_power_draw: number | null;
  gpu_count: number;
  reporting_count?: number;
  lost_count?: number;
}

export type TrainingStatus = 'queued' | 'scheduled' | 'running' | 'succeeded' | 'failed' | 'cancelled';

export interface Training {
  id: string;
  name: string;
  owner: string;
  recipe: string;
  config: Record<string, unknown>;
  status: TrainingStatus | string;
  status_reason?: string | null;
  wait_reason?: string | null;
  priority?: number;
  gpu_ids?: number[] | null;
  distributed?: boolean;
  world_size?: number;
  /** The host that owns the GPUs. */
  host_name?: string | null;
  requested_host?: string | null;
  memory_estimate?: number | null;
  estimate?: Record<string, unknown> | null;
  selection?: Record<string, unknown> | null;
  measured_peak_memory?: number | null;
  restarts?: number;
  max_restarts?: number;
  step?: number;
  max_steps?: number | null;
  last_loss?: number | null;
  last_checkpoint?: string | null;
  created_at: string;
  started_at?: string | null;
  finished_at?: string | null;
}

export interface TrainingsPublic {
  data: Training[];
  count: number;
}

export interface TrainingEvent {
  seq: number;
  time: string;
  kind: string;
  status?: string | null;
  reason?: string | null;
  user?: string | null;
  data?: Record<string, unknown> | null;
}

export interface TrainingMetric {
  step: number;
  time?: string;
  loss: number | null;
  metrics?: Record<string, number | null>;
  rank_step_times?: number[] | null;
}

export interface TrainingLogs {
  text: string;
  offset: number;
  next_offset?: number;
  size?: number;
}

export interface EstimatePart {
  name: string;
  bytes: number;
}

export interface Candidate {
  host: string;
  gpu_indexes: number[];
  score: number;
  connection: string;
  reasons: string[];
  free_memory?: number[];
  weights?: number[];
}

export interface RecommendResponse {
  memory_bytes?: number | null;
  estimate?: { total?: number; bytes?: number; breakdown?: Record<string, number>; method?: string; note?: string } | null;
  candidates: Candidate[];
  refused?: string | null;
  wait_reason?: string | null;
}

export interface ValidationProblem {
  /** unknown-gpu | duplicate | busy | foreign-busy | short-of-memory | mixed-vendors | no-peer-access ... */
  code: string;
  message: string;
  gpu_index?: number | null;
}

export interface ValidateResponse {
  ok: boolean;
  host?: string | null;
  gpu_indexes?: number[];
  problems: ValidationProblem[];
  warnings?: ValidationProblem[];
  weights?: number[];
}
