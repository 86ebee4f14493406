import { render, screen, within } from '@testing-library/react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import type { Pool } from '../../api/types';
import { gresGpus, PoolsSection } from './PoolsSection';

const GiB = 1024 ** 3;

function pool(over: Partial<Pool> = {}): Pool {
  return {
    id: '0199aaaa-0000-7000-8000-000000000001',
    name: 'institute',
    kind: 'slurm',
    partition: 'gpu',
    account: null,
    gpus_per_node: 4,
    gpu_model: 'H100',
    gpu_memory: 80 * GiB,
    checkpoint_root: '/shared/ckpt',
    python: 'python3',
    created_at: '2026-11-21T10:00:00Z',
    nodes: [
      { name: 'gpu01', state: 'mixed', gres: 'gpu:h100:4(S:0-1)', gres_used: 'gpu:h100:3(IDX:0-1,3)', cpus: '8/24/0/32' },
      { name: 'gpu02', state: 'idle', gres: 'gpu:h100:4(S:0-1)', gres_used: 'gpu:h100:0(IDX:N/A)', cpus: '0/32/0/32' },
    ],
    error: null,
    ...over,
  } as Pool;
}

describe('gresGpus', () => {
  it('counts the GPUs of every gpu entry and nothing else', () => {
    expect(gresGpus('gpu:4')).toBe(4);
    expect(gresGpus('gpu:h100:4(S:0-1)')).toBe(4);
    expect(gresGpus('gpu:h100:3(IDX:0-1,3)')).toBe(3);
    expect(gresGpus('gpu:a100:2(IDX:0,3),gpu:h100:1(IDX:0)')).toBe(3);
    expect(gresGpus('gpu:h100:0(IDX:N/A)')).toBe(0);
    expect(gresGpus('shard:8,gpu:2')).toBe(2);
    expect(gresGpus('(null)')).toBe(0);
    expect(gresGpus('')).toBe(0);
  });
});

describe('PoolsSection', () => {
  afterEach(() => vi.restoreAllMocks());

  it('shows each pool with its nodes, their state and the GPUs in use', async () => {
    vi.spyOn(endpoints, 'pools').mockResolvedValue({ data: [pool()], count: 1 });
    render(<PoolsSection />);
    const group = await screen.findByRole('region', { name: 'Pool institute' });
    expect(group).toHaveTextContent('Slurm partition gpu');
    expect(group).toHaveTextContent('H100, 80.0 GiB');
    expect(group).toHaveTextContent('3 of 8 GPUs in use on 2 nodes');
    const busy = within(group).getByTestId('pool-node-gpu01');
    expect(busy).toHaveTextContent('mixed');
    expect(busy).toHaveTextContent('3 of 4');
    expect(within(group).getByTestId('pool-node-gpu02')).toHaveTextContent('0 of 4');
    expect(group).toHaveTextContent('--pool institute');
  });

  it("says why a pool's nodes are missing when Slurm did not answer", async () => {
    vi.spyOn(endpoints, 'pools').mockResolvedValue({
      data: [pool({ nodes: null, error: 'sinfo: error: Unable to contact slurm controller' })],
      count: 1,
    });
    render(<PoolsSection />);
    const group = await screen.findByRole('region', { name: 'Pool institute' });
    expect(group).toHaveTextContent('Slurm did not answer: sinfo: error: Unable to contact slurm controller');
    expect(within(group).queryByRole('table')).toBeNull();
  });

  it('shows nothing when the team has no pool or the list cannot be read', async () => {
    const list = vi.spyOn(endpoints, 'pools').mockResolvedValue({ data: [], count: 0 });
    const { unmount } = render(<PoolsSection />);
    await vi.waitFor(() => expect(list).toHaveBeenCalled());
    expect(screen.queryByTestId('pools')).toBeNull();
    unmount();
    list.mockRejectedValue(new ApiError(403, 'no'));
    render(<PoolsSection />);
    await vi.waitFor(() => expect(list).toHaveBeenCalledTimes(2));
    expect(screen.queryByTestId('pools')).toBeNull();
  });
});
