/**
 * What the Sessions page says about a session, as pure functions of its
 * public record (and the clock), so they are tested without a page.
 */
import type { Session } from '../../api/types';
import { fmtDuration } from '../../lib/format';

export const LIVE = ['starting', 'running'] as const;

export function isLive(s: Pick<Session, 'status'>): boolean {
  return (LIVE as readonly string[]).includes(s.status);
}

/** The session's GPUs: "host: 0, 1" once placed, else how many it asked for. */
export function gpusText(s: Pick<Session, 'gpus' | 'gpu_ids' | 'host' | 'memory_mb'>): string {
  const memory = s.memory_mb ? ` · ${(s.memory_mb / 1024).toFixed(s.memory_mb % 1024 ? 1 : 0)} GiB each` : '';
  if (!s.gpu_ids?.length) return `${s.gpus} GPU${s.gpus === 1 ? '' : 's'}${memory}`;
  return `${s.host ? `${s.host}: ` : ''}${s.gpu_ids.join(', ')}${memory}`;
}

/** Until the hard time limit, while it is live; "—" otherwise. */
export function timeLeft(s: Pick<Session, 'status' | 'ends_at'>, now = Date.now()): string {
  if (!isLive(s) || !s.ends_at) return '—';
  const ms = Date.parse(s.ends_at) - now;
  return ms > 0 ? fmtDuration(ms) : 'ending';
}

/** "idle 12m, stops in 8m" after a warning, "idle 12m" before it, "active" otherwise (live sessions only). */
export function idleText(s: Pick<Session, 'status' | 'idle_since' | 'idle_stop_at'>, now = Date.now()): string {
  if (!isLive(s)) return '—';
  if (!s.idle_since) return 'active';
  const idle = `idle ${fmtDuration(now - Date.parse(s.idle_since))}`;
  if (!s.idle_stop_at) return idle;
  const ms = Date.parse(s.idle_stop_at) - now;
  return `${idle}, stops ${ms > 0 ? `in ${fmtDuration(ms)}` : 'now'}`;
}

/** How to get a shell in the session: on its host, and from any other machine (one ssh). */
export function shellCommands(s: Pick<Session, 'id' | 'host' | 'shell'>): { here: string; ssh: string | null } | null {
  if (!s.shell) return null;
  return { here: s.shell, ssh: s.host ? `ssh -t ${s.host} ${s.shell}` : null };
}
