import { LiveClient, setLiveClient, type SocketLike } from '../api/live';

/** An in-memory WebSocket: records what the client sends, lets a test push frames. */
export class FakeSocket implements SocketLike {
  static all: FakeSocket[] = [];
  readyState = 0;
  sent: Record<string, unknown>[] = [];
  onopen: ((ev: unknown) => void) | null = null;
  onclose: ((ev: unknown) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;

  constructor() {
    FakeSocket.all.push(this);
  }
  send(data: string) {
    this.sent.push(JSON.parse(data));
  }
  close() {
    this.readyState = 3;
    this.onclose?.({});
  }
  open() {
    this.readyState = 1;
    this.onopen?.({});
  }
  push(msg: unknown) {
    this.onmessage?.({ data: JSON.stringify(msg) });
  }
  drop() {
    this.readyState = 3;
    this.onclose?.({});
  }
}

export function installFakeLive(): { client: LiveClient; sockets: FakeSocket[] } {
  FakeSocket.all = [];
  const client = new LiveClient(() => new FakeSocket(), 10);
  setLiveClient(client);
  return { client, sockets: FakeSocket.all };
}
