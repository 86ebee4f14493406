import { describe, expect, it } from 'vitest';
import { gpu } from '../../test/factories';
import { memoryText } from './GpuSelector';

const GiB = 1024 ** 3;

describe('memoryText', () => {
  it('shows the memory really free on a GPU another training reserved, not "0 KiB free"', () => {
    const reserved = gpu('h', 0, {
      live: { ...gpu('h', 0).live!, memory_total: 80 * GiB, memory_used: 4 * GiB, memory_free: 76 * GiB },
      availability: { ...gpu('h', 0).availability!, state: 'busy', reason: 'held by sae-run', free_memory: 0 },
    });
    expect(memoryText(reserved)).toBe('76.0 GiB free of 80.0 GiB · all reserved');
  });

  it('says how much is left to reserve on a shared GPU, and nothing more on a free one', () => {
    const shared = gpu('h', 1, {
      live: { ...gpu('h', 1).live!, memory_total: 80 * GiB, memory_used: 10 * GiB, memory_free: 70 * GiB },
      availability: { ...gpu('h', 1).availability!, state: 'shared', free_memory: 50 * GiB },
    });
    expect(memoryText(shared)).toBe('70.0 GiB free of 80.0 GiB · 50.0 GiB not reserved');
    const free = gpu('h', 2, {
      live: { ...gpu('h', 2).live!, memory_total: 80 * GiB, memory_used: 0, memory_free: 80 * GiB },
      availability: { ...gpu('h', 2).availability!, state: 'free', free_memory: 80 * GiB },
    });
    expect(memoryText(free)).toBe('80.0 GiB free of 80.0 GiB');
  });
});
