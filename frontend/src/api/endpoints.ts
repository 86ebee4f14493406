/**
 * Every server call the dashboard makes. Each goes through `call()` in
 * client.ts, typed by the generated schema: the path, its method, the query,
 * the body and the answer all come from the server's OpenAPI document.
 */
import { call } from './client';
import type {
  BookingCreate,
  FitBody,
  GroupQuota,
  RecommendBody,
  Session,
  SessionCreate,
  SweepCreate,
  TokenCreate,
  Training,
  TrainingCreate,
  UserCreate,
  UserQuota,
  UserUpdate,
  ValidateBody,
  WebhookCreate,
} from './types';

export type HistoryMetric = 'utilization' | 'memory_used' | 'temperature' | 'power_draw';

export const endpoints = {
  gpus: (signal?: AbortSignal) => call('get', '/api/v1/system/gpus', { signal }),
  hosts: (signal?: AbortSignal) => call('get', '/api/v1/system/hosts', { signal }),
  topology: (signal?: AbortSignal) => call('get', '/api/v1/system/topology', { signal }),
  /** Slurm pools, each with its partition's nodes as Slurm reports them now. */
  pools: (signal?: AbortSignal) => call('get', '/api/v1/pools', { signal }),
  /** `gpu` is host:index (repeatable); `aggregate` folds the GPUs into one series. */
  history: (q: { gpu?: string | string[]; host?: string; aggregate?: boolean; from: string; to: string; points: number }, signal?: AbortSignal) =>
    call('get', '/api/v1/system/metrics/history', { query: { ...q, gpu: q.gpu === undefined ? undefined : [q.gpu].flat() }, signal }),
  recommend: (body: Partial<RecommendBody> & Pick<RecommendBody, 'recipe' | 'config' | 'count'>) =>
    call('post', '/api/v1/system/gpus/recommend', { body: body as RecommendBody }),
  /** What fits: GPUs, DDP or FSDP and the largest micro-batch, the global batch kept; one trace per layout tried. */
  fit: (body: Partial<FitBody> & Pick<FitBody, 'recipe' | 'config'>) => call('post', '/api/v1/system/gpus/fit', { body: body as FitBody }),
  validate: (body: Partial<ValidateBody> & Pick<ValidateBody, 'gpu_ids'>) => call('post', '/api/v1/system/gpus/validate', { body: body as ValidateBody }),
  /** Take a GPU out of scheduling (admins), or put it back. Trainings on it keep running. */
  drain: (host: string, index: number, reason?: string) =>
    call('post', '/api/v1/system/gpus/{host}/{index}/drain', { path: { host, index }, body: { reason: reason ?? null } }),
  undrain: (host: string, index: number) => call('post', '/api/v1/system/gpus/{host}/{index}/undrain', { path: { host, index } }),
  clearHealth: (host: string, index: number) => call('post', '/api/v1/system/gpus/{host}/{index}/clear-health', { path: { host, index } }),
  /** Who this browser acts as, and with which role. */
  whoami: (signal?: AbortSignal) => call('get', '/api/v1/auth/whoami', { signal }),
  /** GPU time per UTC day and user (or group), days `from`..`to` (YYYY-MM-DD). */
  usage: (q: { by: 'user' | 'group'; from: string; to: string }, signal?: AbortSignal) =>
    call('get', '/api/v1/usage', { query: q, signal }),
  /** Every installed recipe with its config fields and their defaults. */
  recipes: (signal?: AbortSignal) => call('get', '/api/v1/recipes', { signal }),

  /** Interactive sessions (a shell or a notebook on reserved GPUs). */
  sessions: (q: { owner?: string; status?: string; limit?: number; offset?: number }, signal?: AbortSignal) =>
    call('get', '/api/v1/sessions', { query: { ...q, status: q.status ? [q.status as Session['status']] : undefined }, signal }),
  createSession: (body: Partial<SessionCreate> & Pick<SessionCreate, 'gpus'>) => call('post', '/api/v1/sessions', { body: body as SessionCreate }),
  stopSession: (id: string) => call('post', '/api/v1/sessions/{session_id}/stop', { path: { session_id: id } }),
  /** A single-use address of the session's notebook on its own origin (its owner). */
  openSession: (id: string) => call('post', '/api/v1/sessions/{session_id}/open', { path: { session_id: id } }),
  /** The same for an admin joining another member's notebook: recorded on the session. */
  joinSession: (id: string) => call('post', '/api/v1/sessions/{session_id}/join', { path: { session_id: id } }),
  /** Move the time limit `hours` later (up to the owner's maximum). */
  extendSession: (id: string, hours: number) => call('post', '/api/v1/sessions/{session_id}/extend', { path: { session_id: id }, body: { hours } }),

  trainings: (q: { status?: string; owner?: string; limit?: number; offset?: number }, signal?: AbortSignal) =>
    call('get', '/api/v1/trainings', {
      query: { ...q, status: q.status ? [q.status as Training['status']] : undefined },
      signal,
    }),
  training: (id: string, signal?: AbortSignal) => call('get', '/api/v1/trainings/{training_id}', { path: { training_id: id }, signal }),
  createTraining: (body: Partial<TrainingCreate> & Pick<TrainingCreate, 'name' | 'recipe'>) =>
    call('post', '/api/v1/trainings', { body: body as TrainingCreate }),
  cancelTraining: (id: string) => call('post', '/api/v1/trainings/{training_id}/cancel', { path: { training_id: id } }),
  /** Continue an ended training from its newest checkpoint (the same training, queued again). */
  resumeTraining: (id: string) =>
    call('post', '/api/v1/trainings/{training_id}/resume', { path: { training_id: id }, body: { config: {} } }),
  /** Its checkpoints and outputs (its owner and admins). */
  trainingFiles: (id: string, signal?: AbortSignal) =>
    call('get', '/api/v1/trainings/{training_id}/files', { path: { training_id: id }, signal }),
  events: (id: string, afterSeq = 0, signal?: AbortSignal) =>
    call('get', '/api/v1/trainings/{training_id}/events', { path: { training_id: id }, query: { after_seq: afterSeq }, signal }),
  /** The whole curve downsampled to `maxPoints`, or every row after `afterStep`. */
  metrics: (id: string, afterStep = -1, maxPoints = 2000, signal?: AbortSignal) =>
    call('get', '/api/v1/trainings/{training_id}/metrics', {
      path: { training_id: id },
      query: { after_step: afterStep, max_points: maxPoints },
      signal,
    }),
  sweeps: (signal?: AbortSignal) => call('get', '/api/v1/sweeps', { query: { limit: 200 }, signal }),
  sweep: (id: string, signal?: AbortSignal) => call('get', '/api/v1/sweeps/{sweep_id}', { path: { sweep_id: id }, signal }),
  /** Every trial's metric over its steps, for one chart. */
  sweepCurves: (id: string, signal?: AbortSignal) =>
    call('get', '/api/v1/sweeps/{sweep_id}/curves', { path: { sweep_id: id }, signal }),
  cancelSweep: (id: string) => call('post', '/api/v1/sweeps/{sweep_id}/cancel', { path: { sweep_id: id } }),
  /** From a byte offset, or (offset null) the last `tail` lines. */
  logs: (id: string, offset: number | null, tail = 200, signal?: AbortSignal) =>
    call('get', '/api/v1/trainings/{training_id}/logs', { path: { training_id: id }, query: offset == null ? { tail } : { offset }, signal }),
  // ---- The team (admins): users, tokens, groups, quotas, Unix accounts ----
  users: (signal?: AbortSignal) => call('get', '/api/v1/users', { signal }),
  // Users and tokens outlast the page: the server takes them only with the admin's API token re-entered (`token`,
  // sent with this one request), never on the browser's sign-in alone.
  createUser: (body: UserCreate, token?: string) => call('post', '/api/v1/users', { body, headers: secondStep(token) }),
  updateUser: (name: string, body: UserUpdate, token?: string) =>
    call('patch', '/api/v1/users/{name}', { path: { name }, body, headers: secondStep(token) }),
  /**
   * Where a user's code runs is a power that outlasts the page: the server takes it only with the admin's API
   * token re-entered (`token`), never on the browser's cookie alone. `force` maps onto another user's account.
   */
  setUnixAccount: (name: string, unixAccount: string | null, token: string, force = false) =>
    call('put', '/api/v1/users/{name}/unix-account', {
      path: { name },
      body: { unix_account: unixAccount, force },
      headers: { Authorization: `Bearer ${token}` },
    }),
  quotas: (signal?: AbortSignal) => call('get', '/api/v1/quotas', { signal }),
  setUserQuota: (name: string, body: UserQuota) => call('put', '/api/v1/users/{name}/quota', { path: { name }, body }),
  tokens: (signal?: AbortSignal) => call('get', '/api/v1/tokens', { signal }),
  createToken: (body: TokenCreate, token?: string) => call('post', '/api/v1/tokens', { body, headers: secondStep(token) }),
  revokeToken: (id: string) => call('post', '/api/v1/tokens/{token_id}/revoke', { path: { token_id: id } }),
  groups: (signal?: AbortSignal) => call('get', '/api/v1/groups', { signal }),
  createGroup: (name: string) => call('post', '/api/v1/groups', { body: { name } }),
  deleteGroup: (name: string) => call('delete', '/api/v1/groups/{name}', { path: { name } }),
  addGroupMember: (name: string, member: string) =>
    call('post', '/api/v1/groups/{name}/members/{member}', { path: { name, member } }),
  removeGroupMember: (name: string, member: string) =>
    call('delete', '/api/v1/groups/{name}/members/{member}', { path: { name, member } }),
  setGroupQuota: (name: string, body: GroupQuota) => call('put', '/api/v1/groups/{name}/quota', { path: { name }, body }),
  /** The caller's own webhooks (every user manages only their own). */
  webhooks: (signal?: AbortSignal) => call('get', '/api/v1/webhooks', { signal }),
  createWebhook: (body: WebhookCreate) => call('post', '/api/v1/webhooks', { body }),
  deleteWebhook: (id: string) => call('delete', '/api/v1/webhooks/{hook_id}', { path: { hook_id: id } }),
  testWebhook: (id: string) => call('post', '/api/v1/webhooks/{hook_id}/test', { path: { hook_id: id } }),
  /** Bookings meeting `since`..`until` (ISO instants), start and end also shown in `tz`. */
  bookings: (q: { since: string; until: string; tz?: string }, signal?: AbortSignal) =>
    call('get', '/api/v1/bookings', { query: q, signal }),
  /** Book GPUs; a 409's body names the booking in the way and the next free window (docs/bookings.md). */
  createBooking: (body: Partial<BookingCreate> & Pick<BookingCreate, 'start' | 'gpus'>) =>
    call('post', '/api/v1/bookings', { body: body as BookingCreate }),
  cancelBooking: (id: string) => call('delete', '/api/v1/bookings/{booking_id}', { path: { booking_id: id } }),
  /** A new secret iCalendar feed address of one's own (or a group's) bookings; the feed's old address ends. */
  createBookingFeed: (group?: string) => call('post', '/api/v1/booking-feeds', { body: group ? { group } : {} }),
  /** The next window of `hours` in which `gpus` GPUs on one host are free. */
  freeWindow: (q: { gpus: number; hours: number; host?: string; after?: string }, signal?: AbortSignal) =>
    call('get', '/api/v1/free-window', { query: q, signal }),
  /** Start a sweep: the sweep file's content as JSON (docs/sweeps.md). */
  createSweep: (body: SweepCreate) => call('post', '/api/v1/sweeps', { body }),
};

/** The path of one of a training's files (a download ticket for it, from `download()`, signs the navigation). */
export function trainingFileUrl(id: string, path: string): string {
  return `/api/v1/trainings/${encodeURIComponent(id)}/files/${path.split('/').map(encodeURIComponent).join('/')}`;
}

/** The header of a second step: the signed-in person's own API token, for one request. */
export function secondStep(token?: string): Record<string, string> | undefined {
  return token ? { Authorization: `Bearer ${token}` } : undefined;
}

/** Lists come as {data: [...]} from the list routes. */
export function listOf<T>(x: { data: T[] } | undefined): T[] {
  return x?.data ?? [];
}
