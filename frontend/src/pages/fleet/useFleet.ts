import { useMemo } from 'react';
import { endpoints } from '../../api/endpoints';
import type { GPU } from '../../api/types';
import { useQuery } from '../../api/useQuery';

/**
 * The fleet's GPUs from the REST API: inventory, availability and holders,
 * refreshed every few seconds. Live metrics come separately through the
 * WebSocket, per card, only for cards on screen.
 */
export function useFleet(refreshMs = 5000) {
  const q = useQuery('fleet', (s) => endpoints.gpus(s), refreshMs);
  const gpus = q.data?.data ?? [];
  const byHost = useMemo(() => {
    const m = new Map<string, GPU[]>();
    for (const g of gpus) {
      const list = m.get(g.host) ?? [];
      list.push(g);
      m.set(g.host, list);
    }
    for (const list of m.values()) list.sort((a, b) => a.index - b.index);
    return [...m.entries()].sort(([a], [b]) => a.localeCompare(b));
  }, [gpus]);
  return { ...q, gpus, byHost, simulated: q.data?.simulated ?? false };
}
