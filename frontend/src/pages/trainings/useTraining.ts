import { useCallback, useEffect, useRef, useState } from 'react';
import { ApiError } from '../../api/client';
import { endpoints, listOf } from '../../api/endpoints';
import type { ChannelMessage } from '../../api/live';
import { FINAL_STATUSES, type Training, type TrainingEvent, type TrainingMetric } from '../../api/types';
import { liveClient } from '../../api/live';
import { useChannel } from '../../api/useLive';

export const FINAL = FINAL_STATUSES;
/** The most metric rows kept in the tab; beyond it every other old row is dropped. */
export const MAX_METRICS = 4000;
export const MAX_EVENTS = 500;

/**
 * The union by step of what is shown and what arrived, ordered by step. The
 * REST history and the live channel's snapshot can come in either order and
 * overlap; a step seen on both sides is kept once (the newer copy).
 */
export function mergeMetrics(old: TrainingMetric[], add: TrainingMetric[]): TrainingMetric[] {
  if (add.length === 0) return old;
  const last = old.length ? old[old.length - 1].step : -Infinity;
  let out: TrainingMetric[];
  if (add.every((m, i) => m.step > (i === 0 ? last : add[i - 1].step))) {
    out = old.concat(add); // the usual live update: newer steps only
  } else {
    const byStep = new Map<number, TrainingMetric>();
    for (const m of old) byStep.set(m.step, m);
    for (const m of add) byStep.set(m.step, m);
    out = [...byStep.values()].sort((a, b) => a.step - b.step);
  }
  if (out.length > MAX_METRICS) {
    // Thin the older half so the curve keeps its shape and the newest steps stay dense.
    const half = Math.floor(out.length / 2);
    out = out.slice(0, half).filter((_, i) => i % 2 === 0).concat(out.slice(half));
  }
  return out;
}

export function mergeEvents(old: TrainingEvent[], add: TrainingEvent[]): TrainingEvent[] {
  if (add.length === 0) return old;
  const seen = new Set(old.map((e) => e.seq));
  const out = old.concat(add.filter((e) => !seen.has(e.seq))).sort((a, b) => a.seq - b.seq);
  return out.length > MAX_EVENTS ? out.slice(out.length - MAX_EVENTS) : out;
}

interface FeedData {
  training?: Training | null;
  events?: TrainingEvent[];
  metrics?: TrainingMetric[];
}

/**
 * One training, live: the REST answers first (the whole metric history,
 * downsampled by the server), then the `training:<id>` channel's snapshot and
 * updates. A slow poll covers the time the WebSocket is down.
 */
export function useTraining(id: string) {
  const [training, setTraining] = useState<Training | null>(null);
  const [events, setEvents] = useState<TrainingEvent[]>([]);
  const [metrics, setMetrics] = useState<TrainingMetric[]>([]);
  const [error, setError] = useState<ApiError | null>(null);
  const done = useRef(false);
  // Until the REST history has arrived, ask for all of it: rows from the live
  // snapshot must not make the first call ask only for steps after theirs.
  const haveHistory = useRef(false);

  const lastStep = useRef(-1);
  const lastSeq = useRef(0);
  lastStep.current = metrics.length ? metrics[metrics.length - 1].step : -1;
  lastSeq.current = events.length ? events[events.length - 1].seq : 0;

  // The first call gets the whole curve downsampled; later ones only new rows.
  const refresh = useCallback(async () => {
    // Each part on its own: a failing metrics or events call must not keep the
    // status (the part a person watches) from updating.
    const [t, ev, m] = await Promise.allSettled([
      endpoints.training(id),
      endpoints.events(id, lastSeq.current),
      haveHistory.current ? endpoints.metrics(id, lastStep.current, 10000) : endpoints.metrics(id, -1, 2000),
    ]);
    if (t.status === 'fulfilled') {
      setTraining((old) => ({ ...(old ?? {}), ...t.value }));
      done.current = FINAL.has(t.value.status);
    }
    if (ev.status === 'fulfilled') setEvents((old) => mergeEvents(old, listOf(ev.value)));
    if (m.status === 'fulfilled') {
      haveHistory.current = true;
      setMetrics((old) => mergeMetrics(old, listOf(m.value)));
    }
    const failed = [t, ev, m].find((r): r is PromiseRejectedResult => r.status === 'rejected');
    setError(failed ? (failed.reason as ApiError) : null);
  }, [id]);

  useEffect(() => {
    setTraining(null);
    setEvents([]);
    setMetrics([]);
    done.current = false;
    haveHistory.current = false;
    void refresh();
    // While the live channel is up it carries every change; the poll is then
    // only a slow safety net (every 4th tick), and the only source when it is down.
    let tick = 0;
    const timer = setInterval(() => {
      tick += 1;
      if (done.current) return;
      if (liveClient().status !== 'open' || tick % 4 === 0) void refresh();
    }, 4000);
    return () => clearInterval(timer);
  }, [id, refresh]);

  const onMessage = useCallback((msg: ChannelMessage) => {
    const d = (msg.data ?? {}) as FeedData;
    if (d.training) {
      setTraining((old) => ({ ...(old ?? ({} as Training)), ...d.training! }));
      done.current = FINAL.has(d.training.status);
    }
    if (d.events?.length) setEvents((old) => mergeEvents(old, d.events!));
    if (d.metrics?.length) setMetrics((old) => mergeMetrics(old, d.metrics!));
  }, []);
  useChannel(`training:${id}`, onMessage);

  return { training, events, metrics, error, refresh };
}
