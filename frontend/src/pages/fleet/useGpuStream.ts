import { useCallback, useEffect, useRef, useState } from 'react';
import type { ChannelMessage } from '../../api/live';
import type { GPULive, HistorySeries } from '../../api/types';
import { useChannel } from '../../api/useLive';
import { Ring } from '../../lib/ring';

/** Five minutes at the default 1 Hz sampling: what a mini chart shows. */
export const MINI_POINTS = 300;

export interface GpuStream {
  live: GPULive | null;
  util: Ring;
  mem: Ring;
  version: number;
}

function tsOf(s: GPULive): number {
  return s.timestamp ? Date.parse(s.timestamp) / 1000 : Date.now() / 1000;
}

/** A live message's samples: an update carries one, a snapshot may carry recent history. */
export function samplesOf(data: unknown): GPULive[] {
  if (!data || typeof data !== 'object') return [];
  const d = data as { sample?: GPULive; samples?: GPULive[]; history?: GPULive[] };
  if (Array.isArray(d.samples)) return d.samples;
  const out: GPULive[] = Array.isArray(d.history) ? [...d.history] : [];
  if (d.sample) out.push(d.sample);
  else if (!Array.isArray(d.history)) out.push(data as GPULive);
  return out;
}

/**
 * Follow `gpu:<host>:<index>` while `enabled` (the card is on screen). The
 * rings keep the last MINI_POINTS samples whatever the tab's age.
 */
export function useGpuStream(
  host: string,
  index: number,
  initial: GPULive | null | undefined,
  enabled: boolean,
  seed?: HistorySeries,
  memoryTotal?: number | null,
): GpuStream {
  const util = useRef(new Ring(MINI_POINTS));
  const mem = useRef(new Ring(MINI_POINTS));
  const [live, setLive] = useState<GPULive | null>(initial ?? null);
  const [version, setVersion] = useState(0);

  // The stored last minutes fill the chart at once instead of from the right edge.
  useEffect(() => {
    if (!seed?.points.length) return;
    const pts = seed.points.map((p) => [Date.parse(p.t) / 1000, p] as const);
    util.current.backfill(pts.map(([t, p]) => [t, p.utilization_avg ?? null]));
    mem.current.backfill(pts.map(([t, p]) => [t, p.memory_used_avg != null && memoryTotal ? (100 * p.memory_used_avg) / memoryTotal : null]));
    setVersion((v) => v + 1);
  }, [seed, memoryTotal]);

  const onMessage = useCallback((msg: ChannelMessage) => {
    const samples = samplesOf(msg.data);
    if (samples.length === 0) return;
    for (const s of samples) {
      const t = tsOf(s);
      util.current.push(t, s.utilization);
      const memPct = s.memory_used != null && s.memory_total ? (100 * s.memory_used) / s.memory_total : null;
      mem.current.push(t, memPct);
    }
    setLive(samples[samples.length - 1]);
    setVersion((v) => v + 1);
  }, []);

  useChannel(`gpu:${host}:${index}`, onMessage, enabled);
  return { live: live ?? initial ?? null, util: util.current, mem: mem.current, version };
}
