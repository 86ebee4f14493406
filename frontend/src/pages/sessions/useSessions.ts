import { endpoints } from '../../api/endpoints';
import { useQuery } from '../../api/useQuery';

/** Sessions, newest first as the server lists them, refreshed every few seconds. */
export function useSessions(owner: string, status: string, intervalMs = 3000) {
  return useQuery(`sessions|${owner}|${status}`, (s) => endpoints.sessions({ owner: owner || undefined, status: status || undefined }, s), intervalMs);
}
