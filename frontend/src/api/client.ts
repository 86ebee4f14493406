/**
 * The one module that talks HTTP to gpufleet. Every request goes through
 * `request()`, so authentication (the HTTP-only session cookie the server sets
 * at sign-in) and errors are handled once: a failure is always an `ApiError`
 * whose message a person can act on.
 */

import type { paths } from './schema';

export const API_BASE = '/api/v1';

export class ApiError extends Error {
  /** HTTP status; 0 when the server could not be reached at all. */
  readonly status: number;
  /** Per-field problems from a 422, keyed by dotted field path. */
  readonly fields: Record<string, string>;
  /** The refusal's whole body as the server sent it (a 409's booking in the way, say). */
  body: unknown = null;

  constructor(status: number, message: string, fields: Record<string, string> = {}) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.fields = fields;
  }

  get unreachable(): boolean {
    return this.status === 0;
  }
}

type Query = Record<string, unknown>;

export interface RequestOptions {
  query?: Query;
  body?: unknown;
  signal?: AbortSignal;
  /** Extra headers: a re-entered API token for a call that needs a second step beyond the cookie. */
  headers?: Record<string, string>;
}

// ---- The session's page key ------------------------------------------------
// The session cookie counts only beside its page key, sent as a header, which a browser never adds by itself:
// a cookie captured by a listener on another port of this host signs nothing in. The key is given once to the
// page that signs in (the sign-in answer, or a sign-in link's redirect fragment) and kept in this origin's own
// storage, which no other origin (another port, another host) can read.

export const PAGE_KEY_HEADER = 'X-Gpufleet-Key';
const PAGE_KEY_STORE = 'gpufleet-page-key';
const PAGE_KEY_FRAGMENT = 'gpufleet-key';

function storage(): Storage | null {
  try {
    return typeof window === 'undefined' ? null : window.localStorage;
  } catch {
    return null;
  }
}

export function pageKey(): string | null {
  return storage()?.getItem(PAGE_KEY_STORE) ?? null;
}

export function setPageKey(key: string | null): void {
  const store = storage();
  if (!store) return;
  if (key) store.setItem(PAGE_KEY_STORE, key);
  else store.removeItem(PAGE_KEY_STORE);
}

/**
 * A sign-in link lands on `/#gpufleet-key=<key>`: keep the key, and take it out of the address bar and the
 * history entry. Returns whether one was there.
 */
export function adoptPageKeyFromFragment(): boolean {
  if (typeof window === 'undefined') return false;
  const hash = window.location.hash.replace(/^#/, '');
  const params = new URLSearchParams(hash);
  const key = params.get(PAGE_KEY_FRAGMENT);
  if (!key) return false;
  setPageKey(key);
  params.delete(PAGE_KEY_FRAGMENT);
  const rest = params.toString();
  window.history.replaceState(window.history.state, '', window.location.pathname + window.location.search + (rest ? `#${rest}` : ''));
  return true;
}

/** Listeners told when the server answers 401, so the app can show sign-in. */
const authListeners = new Set<() => void>();
export function onAuthRequired(fn: () => void): () => void {
  authListeners.add(fn);
  return () => authListeners.delete(fn);
}

export function buildUrl(path: string, query?: Query): string {
  const url = path.startsWith('/api/') ? path : `${API_BASE}${path}`;
  if (!query) return url;
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v == null || v === '') continue;
    if (Array.isArray(v)) v.forEach((item) => params.append(k, String(item)));
    else params.append(k, String(v));
  }
  const qs = params.toString();
  return qs ? `${url}?${qs}` : url;
}

interface ValidationItem {
  loc?: (string | number)[];
  msg?: string;
}

/** Turn FastAPI's error bodies ({detail: str} or {detail: [{loc, msg}]}) into words. */
export function describeError(status: number, body: unknown): ApiError {
  const detail = (body as { detail?: unknown } | null)?.detail;
  if (typeof detail === 'string') return new ApiError(status, detail);
  if (Array.isArray(detail)) {
    const fields: Record<string, string> = {};
    const lines = (detail as ValidationItem[]).map((d) => {
      // Drop the "body"/"query" prefix: the person sees the form, not the request.
      const loc = (d.loc ?? []).filter((p) => p !== 'body' && p !== 'query').join('.');
      const msg = d.msg ?? 'invalid value';
      if (loc) fields[loc] = msg;
      return loc ? `${loc}: ${msg}` : msg;
    });
    return new ApiError(status, lines.join('; ') || `Request refused (${status})`, fields);
  }
  if (detail && typeof detail === 'object' && 'message' in detail) {
    return new ApiError(status, String((detail as { message: unknown }).message));
  }
  if (status === 401) return new ApiError(status, 'Sign in to continue.');
  if (status === 403) return new ApiError(status, 'You are not allowed to do this.');
  if (status >= 500) return new ApiError(status, `The server failed (${status}). Its log says why.`);
  return new ApiError(status, `Request failed (${status}).`);
}

/**
 * A 429 (the server is serving all it takes at once, or a rate limit) or a 503 (the database is away)
 * says that nothing was done and when to come back (`Retry-After`). A page opening fires a dozen reads at
 * once, so on a loaded server some of them meet a 429: they are sent again after the wait the server
 * asks, while the waits add up to at most `RETRY_BUDGET_S`. A longer wait (a sign-in locked out for a
 * minute) is the person's to see, not the page's to sit through.
 */
export const RETRY_BUDGET_S = 20;

function retryAfterSeconds(res: Response): number | null {
  if (res.status !== 429 && res.status !== 503) return null;
  const seconds = Number(res.headers.get('Retry-After'));
  return Number.isFinite(seconds) && seconds >= 0 && seconds <= RETRY_BUDGET_S ? seconds : null;
}

function pause(seconds: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const aborted = () => {
      clearTimeout(timer);
      reject(new DOMException('aborted', 'AbortError'));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', aborted);
      resolve();
    }, seconds * 1000);
    if (signal?.aborted) aborted();
    else signal?.addEventListener('abort', aborted, { once: true });
  });
}

export async function request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
  const headers: Record<string, string> = { Accept: 'application/json', ...opts.headers };
  const key = pageKey();
  if (key) headers[PAGE_KEY_HEADER] = key;
  let body: string | undefined;
  if (opts.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(opts.body);
  }
  let res: Response;
  for (let waited = 0; ; ) {
    try {
      res = await fetch(buildUrl(path, opts.query), {
        method,
        headers,
        body,
        credentials: 'same-origin',
        signal: opts.signal,
      });
    } catch (err) {
      if ((err as Error).name === 'AbortError') throw err;
      throw new ApiError(0, 'The gpufleet server cannot be reached: is gpufleet serve running?');
    }
    const wait = retryAfterSeconds(res);
    if (wait === null || waited + wait > RETRY_BUDGET_S) break;
    const delay = Math.max(wait, 0.25);
    waited += delay;
    await pause(delay, opts.signal);
  }
  const text = await res.text();
  let parsed: unknown = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  if (!res.ok) {
    if (res.status === 401) authListeners.forEach((fn) => fn());
    const err = describeError(res.status, parsed);
    err.body = parsed;
    throw err;
  }
  return parsed as T;
}

// ---- Calls typed by the generated schema --------------------------------
// `call('get', '/api/v1/trainings/{training_id}', {path: {training_id}})`:
// the path must exist in the server's OpenAPI document with that method, and
// the query, body and answer types are the schema's, so a renamed route or
// parameter fails `tsc` rather than the dashboard.

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';
type Op<P extends keyof paths, M extends Method> = NonNullable<paths[P][M]>;
type JsonOf<R> = R extends { content: { 'application/json': infer J } } ? J : never;
type Answer<O> = O extends { responses: infer R } ? (204 extends keyof R ? null : JsonOf<R[Extract<keyof R, 200 | 201>]>) : never;
type QueryOf<O> = O extends { parameters: { query?: infer Q } } ? Q : never;
type PathOf<O> = O extends { parameters: { path: infer A } } ? A : never;
type BodyOf<O> = O extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never;

export interface CallOptions<O> {
  path?: PathOf<O>;
  query?: QueryOf<O>;
  body?: BodyOf<O>;
  signal?: AbortSignal;
  headers?: Record<string, string>;
}

export function call<P extends keyof paths, M extends Method>(
  method: M,
  template: P,
  opts: CallOptions<Op<P, M>> = {},
): Promise<Answer<Op<P, M>>> {
  const params = (opts.path ?? {}) as Record<string, string | number>;
  const url = String(template).replace(/\{(\w+)\}/g, (_, k: string) => encodeURIComponent(String(params[k])));
  return request<Answer<Op<P, M>>>(method.toUpperCase(), url, {
    query: opts.query as Query | undefined,
    body: opts.body,
    signal: opts.signal,
    headers: opts.headers,
  });
}

export interface WhoAmI {
  name: string;
  role: string;
  via: string;
  auth_required: boolean;
}

/** Exchange an API token for the HTTP-only session cookie and its page key (the token is not kept). */
export async function signIn(token: string): Promise<WhoAmI> {
  const answer = await request<WhoAmI & { page_key: string }>('POST', '/auth/sign-in', { body: { token } });
  setPageKey(answer.page_key);
  return answer;
}

/**
 * Download one of a training's files: a navigation carries no header, so ask for a single-use link first
 * (with the cookie and the page key) and open that.
 */
export async function download(path: string): Promise<void> {
  const ticket = await request<{ url: string }>('POST', '/auth/download-ticket', { body: { path } });
  const a = document.createElement('a');
  a.href = ticket.url;
  a.download = '';
  a.rel = 'noopener';
  document.body.appendChild(a);
  a.click();
  a.remove();
}

export const api = {
  get: <T>(path: string, query?: Query, signal?: AbortSignal) => request<T>('GET', path, { query, signal }),
  post: <T>(path: string, body?: unknown, query?: Query) => request<T>('POST', path, { body, query }),
};
