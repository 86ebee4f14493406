import { describe, expect, it } from 'vitest';
import { session } from '../../test/factories';
import { gpusText, idleText, shellCommands, timeLeft } from './sessionText';

const now = Date.parse('2026-11-21T12:00:00Z');

describe('session text', () => {
  it('names the GPUs once placed, else how many were asked for', () => {
    expect(gpusText(session({ gpu_ids: [0, 1], host: 'a100-01' }))).toBe('a100-01: 0, 1');
    expect(gpusText(session({ gpu_ids: null, host: null, gpus: 2, memory_mb: 20480 }))).toBe('2 GPUs · 20 GiB each');
  });

  it('counts down to the time limit while live', () => {
    expect(timeLeft(session({ ends_at: '2026-11-21T13:30:00Z' }), now)).toBe('1h 30m');
    expect(timeLeft(session({ ends_at: '2026-11-21T11:00:00Z' }), now)).toBe('ending');
    expect(timeLeft(session({ status: 'stopped' }), now)).toBe('—');
  });

  it('says whether it is idle and when it will be stopped for it', () => {
    expect(idleText(session(), now)).toBe('active');
    expect(idleText(session({ idle_since: '2026-11-21T11:48:00Z' }), now)).toBe('idle 12m 00s');
    expect(idleText(session({ idle_since: '2026-11-21T11:00:00Z', idle_stop_at: '2026-11-21T12:08:00Z' }), now)).toBe(
      'idle 1h 00m, stops in 8m 00s',
    );
  });

  it('gives the shell command on the host and the ssh one from elsewhere', () => {
    expect(shellCommands(session({ host: 'gpu-7' }))).toEqual({
      here: 'gpufleet session shell 5e551011-0000-4000-8000-000000000001',
      ssh: 'ssh -t gpu-7 gpufleet session shell 5e551011-0000-4000-8000-000000000001',
    });
    expect(shellCommands(session({ shell: null }))).toBeNull();
  });
});
