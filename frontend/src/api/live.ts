/**
 * One WebSocket to /api/v1/ws for the whole tab, shared by every component.
 *
 * Components subscribe to channels (`gpu:<host>:<index>`, `host:<name>`,
 * `aggregate`, `training:<id>`) while they are on screen; the client counts
 * subscribers per channel so the server is asked only for what is shown.
 * It remembers the newest sequence number per channel and, after a dropped
 * connection, reconnects with backoff and resubscribes from there, so updates
 * missed in between are replayed rather than lost.
 */

import { request } from './client';
import type { components } from './schema';

type S = components['schemas'];

/** idle: nothing on screen needs live data, so no socket is open (not an error). */
export type LiveStatus = 'idle' | 'connecting' | 'open' | 'closed';

/** Any frame the server sends (generated from the server's models, gpufleet/wire/live.py). */
export type ServerMessage = S['LiveMessage'];
/** What a channel's subscribers get: its whole state (snapshot; skipped: true after a slow read) or an update. */
export type ChannelMessage = S['LiveSnapshot'] | S['LiveUpdate'];
/** What the client sends. */
type ClientMessage = S['LiveRequest'];

type Handler = (msg: ChannelMessage) => void;

export interface SocketLike {
  readyState: number;
  send(data: string): void;
  close(): void;
  onopen: ((ev: unknown) => void) | null;
  onclose: ((ev: unknown) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
}

const OPEN = 1;

export function defaultWsUrl(): string {
  const proto = window.location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${proto}//${window.location.host}/api/v1/ws`;
}

/**
 * Open the live stream with a single-use ticket: a WebSocket carries the cookie but no header, so the cookie
 * alone never opens one; the ticket is asked for with the cookie and the page key.
 */
export async function openWithTicket(): Promise<SocketLike> {
  const t = await request<{ ticket: string }>('POST', '/auth/ws-ticket');
  return new WebSocket(`${defaultWsUrl()}?ticket=${encodeURIComponent(t.ticket)}`) as unknown as SocketLike;
}

export class LiveClient {
  private socket: SocketLike | null = null;
  private handlers = new Map<string, Set<Handler>>();
  private lastSeq = new Map<string, number>();
  /** The server hub's epoch: sequence numbers only mean something within one. */
  private epoch: string | undefined;
  private statusListeners = new Set<(s: LiveStatus) => void>();
  private retry = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private stopped = false;
  /** A socket is being opened (its ticket asked for). */
  private opening = false;
  status: LiveStatus = 'idle';

  constructor(
    private readonly open: () => SocketLike | Promise<SocketLike> = openWithTicket,
    private readonly maxBackoffMs = 10_000,
  ) {}

  subscribe(channel: string, fn: Handler): () => void {
    let set = this.handlers.get(channel);
    const fresh = !set;
    if (!set) {
      set = new Set();
      this.handlers.set(channel, set);
    }
    set.add(fn);
    if (fresh) {
      if (this.socket?.readyState === OPEN) this.send({ op: 'subscribe', channels: [channel] });
      else this.connect();
    }
    return () => {
      const s = this.handlers.get(channel);
      if (!s) return;
      s.delete(fn);
      if (s.size === 0) {
        this.handlers.delete(channel);
        this.lastSeq.delete(channel);
        if (this.socket?.readyState === OPEN) this.send({ op: 'unsubscribe', channels: [channel] });
      }
    };
  }

  channels(): string[] {
    return [...this.handlers.keys()];
  }

  seqOf(channel: string): number | undefined {
    return this.lastSeq.get(channel);
  }

  onStatus(fn: (s: LiveStatus) => void): () => void {
    this.statusListeners.add(fn);
    return () => this.statusListeners.delete(fn);
  }

  close(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.socket?.close();
    this.socket = null;
    this.setStatus('closed');
  }

  private setStatus(s: LiveStatus): void {
    this.status = s;
    this.statusListeners.forEach((fn) => fn(s));
  }

  private send(msg: ClientMessage): void {
    this.socket?.send(JSON.stringify(msg));
  }

  private connect(): void {
    if (this.socket || this.opening || this.stopped || this.timer) return;
    this.setStatus('connecting');
    let made: SocketLike | Promise<SocketLike>;
    try {
      made = this.open();
    } catch {
      this.scheduleReconnect();
      return;
    }
    if (!(made instanceof Promise)) {
      this.attach(made);
      return;
    }
    this.opening = true;
    made.then(
      (sock) => {
        this.opening = false;
        if (this.stopped) sock.close();
        else this.attach(sock);
      },
      () => {
        this.opening = false;
        if (!this.stopped) this.scheduleReconnect();
      },
    );
  }

  private attach(sock: SocketLike): void {
    this.socket = sock;
    sock.onopen = () => {
      this.retry = 0;
      this.setStatus('open');
      // Resume: ask for what came after the newest update already seen; a
      // server that restarted (another epoch) answers with a fresh snapshot.
      for (const channel of this.channels()) {
        const since = this.lastSeq.get(channel);
        if (since !== undefined && this.epoch) this.send({ op: 'subscribe', channel, since, epoch: this.epoch });
        else this.send({ op: 'subscribe', channel });
      }
    };
    sock.onmessage = (ev) => this.dispatch(ev.data);
    sock.onerror = () => {
      /* onclose follows and reconnects */
    };
    sock.onclose = () => {
      this.socket = null;
      if (this.stopped) return;
      if (this.handlers.size > 0) {
        this.setStatus('closed');
        this.scheduleReconnect();
      } else this.setStatus('idle');
    };
  }

  private scheduleReconnect(): void {
    const delay = Math.min(this.maxBackoffMs, 500 * 2 ** this.retry);
    this.retry += 1;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.connect();
    }, delay);
  }

  private dispatch(raw: unknown): void {
    let parsed: ServerMessage;
    try {
      parsed = JSON.parse(String(raw));
    } catch {
      return;
    }
    if (!parsed || typeof parsed !== 'object') return;
    if (parsed.type === 'batch' && Array.isArray(parsed.messages)) {
      parsed.messages.forEach((m) => this.deliver(m));
      return;
    }
    if (parsed.type === 'hello') {
      this.epoch = parsed.epoch;
      return;
    }
    this.deliver(parsed);
  }

  private deliver(msg: ServerMessage): void {
    if (!msg || !('channel' in msg) || typeof msg.channel !== 'string') return;
    if (msg.type !== 'snapshot' && msg.type !== 'update') return;
    if (msg.epoch) this.epoch = msg.epoch;
    const set = this.handlers.get(msg.channel);
    if (!set) return;
    if (typeof msg.seq === 'number') {
      const prev = this.lastSeq.get(msg.channel);
      // A replay after resume can overlap what was seen: drop duplicates.
      if (msg.type !== 'snapshot' && prev !== undefined && msg.seq <= prev) return;
      this.lastSeq.set(msg.channel, msg.seq);
    }
    set.forEach((fn) => fn(msg));
  }
}

let shared: LiveClient | null = null;

export function liveClient(): LiveClient {
  if (!shared) shared = new LiveClient();
  return shared;
}

/** For tests: replace the shared client. */
export function setLiveClient(c: LiveClient | null): void {
  shared = c;
}
