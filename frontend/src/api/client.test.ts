import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  ApiError, PAGE_KEY_HEADER, RETRY_BUDGET_S, adoptPageKeyFromFragment, api, buildUrl, describeError, onAuthRequired, pageKey,
  setPageKey, signIn,
} from './client';

function respond(status: number, body: unknown) {
  return vi.spyOn(globalThis, 'fetch').mockResolvedValue(new Response(body === undefined ? '' : JSON.stringify(body), { status }));
}

afterEach(() => {
  vi.restoreAllMocks();
  setPageKey(null);
});

describe('request module', () => {
  it('builds URLs under /api/v1 and drops empty query values', () => {
    expect(buildUrl('/trainings', { status: 'running', owner: '', limit: 50, x: null })).toBe('/api/v1/trainings?status=running&limit=50');
    expect(buildUrl('/system/gpus')).toBe('/api/v1/system/gpus');
  });

  it('sends JSON with the session cookie and returns the parsed body', async () => {
    const f = respond(200, { data: [], count: 0 });
    await expect(api.post('/trainings', { name: 'a' })).resolves.toEqual({ data: [], count: 0 });
    const [url, init] = f.mock.calls[0];
    expect(url).toBe('/api/v1/trainings');
    expect(init?.credentials).toBe('same-origin');
    expect(init?.body).toBe('{"name":"a"}');
    expect((init?.headers as Record<string, string>)['Content-Type']).toBe('application/json');
  });

  it('sends a re-entered API token with the one call that needs a second step', async () => {
    const f = respond(200, { user: 'alice', unix_account: 'alice2' });
    const { endpoints } = await import('./endpoints');
    await endpoints.setUnixAccount('alice', 'alice2', 'gf_admin-token');
    const [url, init] = f.mock.calls[0];
    expect(url).toBe('/api/v1/users/alice/unix-account');
    expect(init?.method).toBe('PUT');
    expect((init?.headers as Record<string, string>).Authorization).toBe('Bearer gf_admin-token');
    expect(init?.body).toBe('{"unix_account":"alice2","force":false}');
  });

  it('turns a FastAPI detail string into the error message', async () => {
    respond(409, { detail: 'GPU 7 does not exist on host a100-01; it has GPUs 0–3' });
    await expect(api.get('/x')).rejects.toMatchObject({ status: 409, message: 'GPU 7 does not exist on host a100-01; it has GPUs 0–3' });
  });

  it('maps 422 items to fields without the body prefix', () => {
    const e = describeError(422, { detail: [{ loc: ['body', 'config', 'lr'], msg: 'must be > 0' }] });
    expect(e.message).toBe('config.lr: must be > 0');
    expect(e.fields).toEqual({ 'config.lr': 'must be > 0' });
  });

  it('says the server is unreachable when fetch fails', async () => {
    vi.spyOn(globalThis, 'fetch').mockRejectedValue(new TypeError('Failed to fetch'));
    const err = (await api.get('/system/gpus').catch((e) => e)) as ApiError;
    expect(err).toBeInstanceOf(ApiError);
    expect(err.unreachable).toBe(true);
    expect(err.message).toMatch(/cannot be reached/);
  });

  it('tells listeners when sign-in is needed', async () => {
    respond(401, { detail: 'sign in first' });
    const seen = vi.fn();
    const off = onAuthRequired(seen);
    await api.get('/trainings').catch(() => undefined);
    off();
    expect(seen).toHaveBeenCalledTimes(1);
  });

  it('sends a read again after the Retry-After of a 429 or a 503, and gives up on a long wait', async () => {
    vi.useFakeTimers();
    try {
      const f = vi.spyOn(globalThis, 'fetch')
        .mockResolvedValueOnce(new Response('{"detail":"busy"}', { status: 429, headers: { 'Retry-After': '1' } }))
        .mockResolvedValueOnce(new Response('{"detail":"database away"}', { status: 503, headers: { 'Retry-After': '5' } }))
        .mockResolvedValueOnce(new Response('{"count":0}', { status: 200 }));
      const answer = api.get('/trainings');
      await vi.advanceTimersByTimeAsync(999);
      expect(f).toHaveBeenCalledTimes(1); // waits the whole second it was asked to
      await vi.advanceTimersByTimeAsync(1 + 5000);
      await expect(answer).resolves.toEqual({ count: 0 });
      expect(f).toHaveBeenCalledTimes(3);

      // A sign-in locked out for a minute is shown at once, not waited out.
      f.mockReset().mockResolvedValue(new Response('{"detail":"too many sign-ins; retry after 60 s"}',
                                                   { status: 429, headers: { 'Retry-After': '60' } }));
      await expect(api.get('/x')).rejects.toMatchObject({ status: 429, message: 'too many sign-ins; retry after 60 s' });
      expect(f).toHaveBeenCalledTimes(1);

      // Retries stop once the waits would pass the budget; the last answer is the error shown.
      f.mockReset().mockImplementation(async () => new Response('{"detail":"busy"}', { status: 429, headers: { 'Retry-After': '3' } }));
      const given = api.get('/y').catch((e) => e);
      await vi.advanceTimersByTimeAsync(RETRY_BUDGET_S * 1000 + 1000);
      expect(await given).toMatchObject({ status: 429, message: 'busy' });
      expect(f).toHaveBeenCalledTimes(Math.floor(RETRY_BUDGET_S / 3) + 1);
    } finally {
      vi.useRealTimers();
    }
  });

  it('stops waiting to retry when the page aborts the request', async () => {
    vi.spyOn(globalThis, 'fetch').mockResolvedValue(new Response('{}', { status: 429, headers: { 'Retry-After': '5' } }));
    const ctrl = new AbortController();
    const answer = api.get('/z', undefined, ctrl.signal);
    await new Promise((r) => setTimeout(r, 10));
    ctrl.abort();
    await expect(answer).rejects.toMatchObject({ name: 'AbortError' });
  });

  it('never shows a bare 500', () => {
    expect(describeError(500, 'Internal Server Error').message).toMatch(/server failed \(500\)/);
  });

  it("keeps the sign-in answer's page key and sends it beside the cookie on every request", async () => {
    respond(200, { name: 'ana', role: 'admin', via: 'session', auth_required: true, page_key: 'k-123' });
    await signIn(' gf_token ');
    expect(pageKey()).toBe('k-123');
    const f = respond(200, { data: [], count: 0 });
    await api.get('/trainings');
    expect((f.mock.calls.at(-1)?.[1]?.headers as Record<string, string>)[PAGE_KEY_HEADER]).toBe('k-123');
  });

  it("takes a sign-in link's page key out of the address and keeps it", () => {
    window.history.replaceState(null, '', '/trainings?x=1#gpufleet-key=k-456');
    expect(adoptPageKeyFromFragment()).toBe(true);
    expect(pageKey()).toBe('k-456');
    expect(window.location.hash).toBe('');
    expect(window.location.pathname + window.location.search).toBe('/trainings?x=1');
    expect(adoptPageKeyFromFragment()).toBe(false);
  });
});
