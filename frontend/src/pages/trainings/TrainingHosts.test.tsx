import { render, screen } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import { metric, training } from '../../test/factories';
import { TrainingHosts } from './TrainingHosts';

const hosts = [
  { host: 'a', node_rank: 0, ranks: [0, 1], gpu_ids: [0, 1], status: 'running', attempt: 1, heartbeat_at: null, message: null },
  { host: 'b', node_rank: 1, ranks: [2, 3], gpu_ids: [2, 3], status: 'running', attempt: 1, heartbeat_at: null, message: null },
];

describe('TrainingHosts', () => {
  it('lists each host with its ranks and GPUs, and marks a straggler on another host', () => {
    const t = training({ world_size: 4, hosts });
    render(<TrainingHosts t={t} metrics={[metric(5, 0.5, { rank_step_times: [0.1, 0.1, 0.1, 0.5] })]} />);
    expect(screen.getByTestId('training-hosts')).toHaveTextContent('Hosts (2, 4 ranks)');
    expect(screen.getByTestId('host-0')).toHaveTextContent('a · rank 0, rendezvous');
    expect(screen.getByTestId('host-0')).toHaveTextContent('0–1');
    expect(screen.getByTestId('host-1')).toHaveTextContent('r2 100 ms');
    expect(screen.getByTestId('host-1')).toHaveTextContent('r3 500 ms slow');
    expect(screen.getByTestId('host-0')).not.toHaveTextContent('slow');
  });
});

describe('gpuText', () => {
  it('names every host of a training across hosts', async () => {
    const { gpuText } = await import('./TrainingsPage');
    expect(gpuText(training({ hosts }))).toBe('a: 0, 1 + b: 2, 3');
    expect(gpuText(training({ host_name: 'h', gpu_ids: [3] }))).toBe('h: 3');
    expect(gpuText(training({ pool: 'cluster' }))).toBe('Slurm pool cluster');
  });
});
