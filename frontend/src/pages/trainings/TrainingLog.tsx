import { useEffect, useRef, useState } from 'react';
import { endpoints } from '../../api/endpoints';
import type { TrainingEvent } from '../../api/types';
import { Pill } from '../../components/States';

/** The most log text kept on screen; older text is cut at a line break. */
export const MAX_LOG_CHARS = 200_000;

const SOURCE = /^((?:\[host [^\]]*\] )?\[rank \d+\] )/;

/**
 * A progress bar's redraws (lines ending in a carriage return) as its newest
 * state: a redraw is dropped once a later line of the same rank follows, as
 * the server does within one read (training/logtext.py).
 */
export function collapseRedraws(text: string): string {
  const lines = text.split('\n');
  const later = new Set<string>();
  const keep: string[] = [];
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i];
    if (line) {
      const source = SOURCE.exec(line)?.[1] ?? '';
      if (line.endsWith('\r') && later.has(source)) continue;
      later.add(source);
    }
    keep.push(line);
  }
  return keep.reverse().join('\n');
}

export function appendLog(old: string, add: string): string {
  const out = collapseRedraws(old + add);
  if (out.length <= MAX_LOG_CHARS) return out;
  const cut = out.indexOf('\n', out.length - MAX_LOG_CHARS);
  return out.slice(cut >= 0 ? cut + 1 : out.length - MAX_LOG_CHARS);
}

/** The log's tail, then what is appended to it while `follow` is on. */
export function LogTail({ id, active }: { id: string; active: boolean }) {
  const [text, setText] = useState('');
  const [follow, setFollow] = useState(true);
  const [error, setError] = useState<string | null>(null);
  const offset = useRef<number | null>(null);
  const box = useRef<HTMLPreElement>(null);

  useEffect(() => {
    offset.current = null;
    setText('');
  }, [id]);

  useEffect(() => {
    let stop = false;
    let timer: ReturnType<typeof setTimeout> | null = null;
    const poll = async () => {
      try {
        const chunk = await endpoints.logs(id, offset.current);
        if (stop) return;
        if (offset.current != null && chunk.size != null && chunk.size < offset.current) {
          // The bounded log was trimmed under us: start again from its tail.
          offset.current = null;
          setText('');
        } else {
          offset.current = chunk.next_offset ?? offset.current;
          if (chunk.text) setText((old) => appendLog(old, chunk.text));
        }
        setError(null);
      } catch (e) {
        if (!stop) setError((e as Error).message);
      }
      if (!stop && follow && active) timer = setTimeout(poll, 1500);
    };
    void poll();
    return () => {
      stop = true;
      if (timer) clearTimeout(timer);
    };
  }, [id, follow, active]);

  useEffect(() => {
    if (follow && box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [text, follow]);

  return (
    <div>
      <div className="actions" style={{ marginBottom: '0.4rem' }}>
        <label style={{ display: 'inline-flex', gap: '0.4rem', alignItems: 'center' }}>
          <input type="checkbox" checked={follow} onChange={(e) => setFollow(e.target.checked)} /> Follow
        </label>
        {error && <span className="field-error">{error}</span>}
      </div>
      <pre className="log" ref={box} tabIndex={0} aria-label="Training log" data-testid="log">
        {text.replace(/\r$/gm, '') || 'No output yet.'}
      </pre>
    </div>
  );
}

export function EventList({ events }: { events: TrainingEvent[] }) {
  if (events.length === 0) return <p className="muted">No events yet.</p>;
  return (
    <ul className="events" data-testid="events">
      {[...events].reverse().map((e) => (
        <li key={e.seq}>
          <span className="muted">{new Date(e.time).toLocaleTimeString()}</span>
          <span>{e.status ? <Pill value={e.status} /> : <span className="muted">{e.kind}</span>}</span>
          <span>
            {e.reason ?? (e.status ? `now ${e.status}` : e.kind)}
            {e.user && <span className="muted"> · {e.user}</span>}
          </span>
        </li>
      ))}
    </ul>
  );
}
