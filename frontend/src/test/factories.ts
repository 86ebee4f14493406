/**
 * Objects of the server's response models, for tests; override what matters.
 * Each is asserted to its type (`as`) so that a field the server adds later
 * does not break the build before a test needs it.
 */
import { fmtBytes } from '../lib/format';
import type {
  Candidate,
  Estimate,
  GPU,
  HistoryResponse,
  Recipe,
  RecipeField,
  RecipesPublic,
  RecommendResponse,
  Session,
  Training,
  TrainingEvent,
  TrainingMetric,
  ValidateResponse,
  ValidationProblem,
} from '../api/types';

const GiB = 1024 ** 3;
const T0 = '2026-11-21T10:00:00Z';

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
      timestamp: T0,
      utilization: 10 * index,
      memory_used: 4 * GiB,
      memory_total: 80 * GiB,
      memory_free: 76 * GiB,
      temperature: 40 + index,
      power_draw: 100,
      power_limit: 700,
      lost: false,
      processes: [],
    },
    availability: { state: 'free', reason: 'free: 76.0 GiB available', free_memory: 76 * GiB, holders: [] },
    ...over,
  } as GPU;
}

export function training(over: Partial<Training> = {}): Training {
  return {
    id: '3f1c2a4e-0000-4000-8000-000000000001',
    name: 'sae-run',
    owner: 'alice',
    kind: 'recipe',
    recipe: 'sae',
    config: {},
    status: 'running',
    status_reason: null,
    priority: 0,
    gpu_ids: [0, 1],
    distributed: true,
    world_size: 2,
    host_name: 'sim-host',
    requested_host: null,
    auto_select: false,
    exclusive: true,
    memory_estimate: 2 * GiB,
    estimate: null,
    selection: null,
    wait_reason: null,
    measured_peak_memory: null,
    peak_memory_per_rank: null,
    restarts: 0,
    max_restarts: 2,
    allow_rebalance: false,
    attempt: 1,
    exit_code: null,
    launcher_pid: null,
    cancel_requested: false,
    preemptible: true,
    preempted_by: null,
    max_runtime_s: null,
    idle_since: null,
    idle_warned_at: null,
    step: 50,
    max_steps: 100,
    last_loss: 0.5,
    last_checkpoint: null,
    event_seq: 1,
    created_at: T0,
    updated_at: T0,
    scheduled_at: T0,
    started_at: '2026-11-21T10:00:01Z',
    finished_at: null,
    gpus: [],
    ...over,
  } as Training;
}

export function metric(step: number, loss: number | null, over: Partial<TrainingMetric> = {}): TrainingMetric {
  return { step, loss, time: T0, metrics: {}, rank_step_times: null, ...over } as TrainingMetric;
}

export function event(seq: number, over: Partial<TrainingEvent> = {}): TrainingEvent {
  return { seq, time: T0, kind: 'status', status: null, reason: null, user: null, data: null, ...over } as TrainingEvent;
}

export function estimate(total: number, over: Partial<Estimate> = {}): Estimate {
  return {
    total,
    summary: `estimated ${fmtBytes(total)} per rank`,
    breakdown: {},
    method: 'traced',
    key: 'k',
    strategy: 'single',
    precision: 'fp32',
    world_size: 1,
    micro_batch_size: 256,
    parameter_count: 1000,
    calibrated_from: 0,
    uncalibrated_total: total,
    ...over,
  } as Estimate;
}

export function candidate(host: string, gpuIndexes: number[], over: Partial<Candidate> = {}): Candidate {
  return { host, gpu_indexes: gpuIndexes, score: 1, connection: 'single', reasons: ['best fit'], free_memory: [], weights: [], ...over } as Candidate;
}

export function recommendation(memory: number, candidates: Candidate[]): RecommendResponse {
  return { memory_bytes: memory, count: 1, host: null, policy: 'pack', candidates, wait_reason: null, estimate: estimate(memory) } as RecommendResponse;
}

export function validation(host: string, gpuIds: number[], problems: ValidationProblem[] = [], warnings: ValidationProblem[] = []): ValidateResponse {
  return { ok: problems.length === 0, host, gpu_ids: gpuIds, memory_bytes: 0, problems, warnings, weights: [] } as ValidateResponse;
}

export function history(series: HistoryResponse['series'] = []): HistoryResponse {
  return { start: T0, end: T0, step_s: 1, source: 'raw', aggregate: false, series } as HistoryResponse;
}

export function recipeField(name: string, kind: RecipeField['kind'], dflt: RecipeField['default'], over: Partial<RecipeField> = {}): RecipeField {
  return { name, kind, default: dflt, choices: null, optional: false, help: null, ...over } as RecipeField;
}

/** The shared fields as the server lists them (a subset of TrainConfig). */
function commonFields(): RecipeField[] {
  return [
    recipeField('max_steps', 'int', 200),
    recipeField('global_batch_size', 'int', 256),
    recipeField('micro_batch_size', 'int', null, { optional: true }),
    recipeField('lr', 'float', 0.001),
    recipeField('weight_decay', 'float', 0),
    recipeField('precision', 'choice', 'fp32', { choices: ['fp32', 'bf16', 'fp16'] }),
    recipeField('seed', 'int', 0),
    recipeField('checkpoint_every', 'int', 100),
    recipeField('strategy', 'choice', 'auto', { choices: ['auto', 'ddp', 'fsdp'] }),
    recipeField('grad_clip', 'float', 1, { optional: true }),
    recipeField('log_every', 'int', 10),
    recipeField('data_path', 'text', null, { optional: true }),
  ];
}

export function recipe(name: string, fields: RecipeField[], over: Partial<Recipe> = {}): Recipe {
  return { name, description: `the ${name} recipe`, fields: [...commonFields(), ...fields], ...over } as Recipe;
}

/** The built-in recipes as the server lists them (sorted by name), plus any extra. */
export function recipes(...extra: Recipe[]): RecipesPublic {
  const data = [
    recipe('mlp', [
      recipeField('in_features', 'int', 16),
      recipeField('out_features', 'int', 1),
      recipeField('hidden', 'int-list', [64, 64]),
      recipeField('task', 'choice', 'regression', { choices: ['regression', 'classification'] }),
      recipeField('activation', 'choice', 'relu', { choices: ['relu', 'gelu', 'tanh'] }),
    ]),
    recipe('sae', [
      recipeField('d_in', 'int', 64),
      recipeField('n_latents', 'int', 512),
      recipeField('variant', 'choice', 'topk', { choices: ['relu', 'topk'] }),
      recipeField('k', 'int', 8),
      recipeField('l1_coeff', 'float', 0.3),
      recipeField('dead_steps', 'int', 100),
    ]),
    ...extra,
  ];
  return { data, count: data.length } as RecipesPublic;
}

export function session(over: Partial<Session> = {}): Session {
  return {
    id: '5e551011-0000-4000-8000-000000000001',
    name: 'session-alice-1',
    owner: 'alice',
    mode: 'jupyter',
    status: 'running',
    status_reason: null,
    wait_reason: null,
    end_reason: null,
    training_status: 'running',
    gpus: 1,
    gpu_ids: [1],
    host: 'sim-host',
    memory_mb: null,
    priority: 0,
    preemptible: false,
    hours: 4,
    created_at: T0,
    started_at: T0,
    ready_at: T0,
    ends_at: '2026-11-21T14:00:00Z',
    finished_at: null,
    idle_since: null,
    idle_warned_at: null,
    idle_stop_at: null,
    url: '/sessions/5e551011-0000-4000-8000-000000000001/',
    shell: 'gpufleet session shell 5e551011-0000-4000-8000-000000000001',
    ...over,
  } as Session;
}
