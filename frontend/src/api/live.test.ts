import { describe, expect, it, vi } from 'vitest';
import { installFakeLive } from '../test/fakeSocket';

describe('LiveClient', () => {
  it('subscribes once per channel and unsubscribes when the last viewer leaves', () => {
    const { client, sockets } = installFakeLive();
    const a = vi.fn();
    const b = vi.fn();
    const offA = client.subscribe('gpu:h1:0', a);
    const offB = client.subscribe('gpu:h1:0', b);
    expect(sockets).toHaveLength(1);
    sockets[0].open();
    expect(sockets[0].sent).toEqual([{ op: 'subscribe', channel: 'gpu:h1:0' }]);
    sockets[0].push({ type: 'snapshot', channel: 'gpu:h1:0', seq: 4, epoch: 'e1', data: { utilization: 5 } });
    expect(a).toHaveBeenCalledTimes(1);
    expect(b).toHaveBeenCalledTimes(1);
    offA();
    expect(sockets[0].sent).toHaveLength(1);
    offB();
    expect(sockets[0].sent[1]).toEqual({ op: 'unsubscribe', channels: ['gpu:h1:0'] });
    expect(client.channels()).toEqual([]);
  });

  it('drops duplicate updates and unpacks batches', () => {
    const { client, sockets } = installFakeLive();
    const got: number[] = [];
    client.subscribe('aggregate', (m) => got.push(m.seq!));
    sockets[0].open();
    sockets[0].push({
      type: 'batch',
      messages: [
        { type: 'snapshot', channel: 'aggregate', seq: 1, data: {} },
        { type: 'update', channel: 'aggregate', seq: 2, data: {} },
        { type: 'update', channel: 'aggregate', seq: 2, data: {} },
        { type: 'update', channel: 'other', seq: 3, data: {} },
      ],
    });
    sockets[0].push({ type: 'update', channel: 'aggregate', seq: 3, data: {} });
    expect(got).toEqual([1, 2, 3]);
  });

  it('reconnects after a drop and resumes each channel from its last seq', async () => {
    vi.useFakeTimers();
    try {
      const { client, sockets } = installFakeLive();
      const statuses: string[] = [];
      client.onStatus((s) => statuses.push(s));
      client.subscribe('aggregate', () => undefined);
      client.subscribe('gpu:h1:2', () => undefined);
      sockets[0].open();
      sockets[0].push({ type: 'hello', epoch: 'ep1' });
      sockets[0].push({ type: 'snapshot', channel: 'aggregate', seq: 7, epoch: 'ep1', data: {} });
      sockets[0].push({ type: 'update', channel: 'aggregate', seq: 8, epoch: 'ep1', data: {} });
      sockets[0].drop();
      expect(statuses).toContain('closed');
      await vi.advanceTimersByTimeAsync(50);
      expect(sockets).toHaveLength(2);
      sockets[1].open();
      expect(sockets[1].sent).toEqual([
        { op: 'subscribe', channel: 'aggregate', since: 8, epoch: 'ep1' },
        // Nothing seen yet on this one: a plain subscribe gets a snapshot.
        { op: 'subscribe', channel: 'gpu:h1:2' },
      ]);
      expect(statuses[statuses.length - 1]).toBe('open');
    } finally {
      vi.useRealTimers();
    }
  });

  it('stops reconnecting when nobody is subscribed', async () => {
    vi.useFakeTimers();
    try {
      const { client, sockets } = installFakeLive();
      const off = client.subscribe('aggregate', () => undefined);
      sockets[0].open();
      off();
      sockets[0].drop();
      await vi.advanceTimersByTimeAsync(100);
      expect(sockets).toHaveLength(1);
    } finally {
      vi.useRealTimers();
    }
  });

  it('opens the stream with a single-use ticket asked for first, never with the cookie alone', async () => {
    const { LiveClient } = await import('./live');
    const f = vi.spyOn(globalThis, 'fetch').mockResolvedValue(
      new Response(JSON.stringify({ ticket: 't/1', expires_in_s: 10, url: '/api/v1/ws' }), { status: 200 }));
    const opened: string[] = [];
    class RecordingSocket {
      readyState = 0;
      onopen = null;
      onclose = null;
      onerror = null;
      onmessage = null;
      constructor(url: string) {
        opened.push(url);
      }
      send() {}
      close() {}
    }
    vi.stubGlobal('WebSocket', RecordingSocket);
    const client = new LiveClient();
    client.subscribe('aggregate', () => {});
    await vi.waitFor(() => expect(opened).toHaveLength(1));
    expect(f.mock.calls[0][0]).toBe('/api/v1/auth/ws-ticket');
    expect(f.mock.calls[0][1]?.method).toBe('POST');
    expect(opened[0]).toMatch(/\/api\/v1\/ws\?ticket=t%2F1$/);
    client.close();
    vi.unstubAllGlobals();
  });
});
