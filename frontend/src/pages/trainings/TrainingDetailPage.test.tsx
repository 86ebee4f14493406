import { render, screen, waitFor } from '@testing-library/react';
import { ApiError } from '../../api/client';
import userEvent from '@testing-library/user-event';
import { MemoryRouter, Route, Routes } from 'react-router-dom';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { endpoints } from '../../api/endpoints';
import type { TrainingMetric } from '../../api/types';
import { event, history, metric, training } from '../../test/factories';
import { TrainingDetailPage } from './TrainingDetailPage';
import { useTraining } from './useTraining';

vi.mock('./useTraining', async (orig) => ({ ...(await orig<typeof import('./useTraining')>()), useTraining: vi.fn() }));

function metrics(n: number): TrainingMetric[] {
  return Array.from({ length: n }, (_, i) =>
    metric(i + 1, 1 / (i + 1), { metrics: { recon: 0.8 / (i + 1), aux: 0.01, samples_per_s: 900 }, rank_step_times: [0.1, i === n - 1 ? 0.5 : 0.1] }),
  );
}

const FILES = { data: [{ path: 'checkpoints/step-000010.pt', size: 2048, modified: '2026-11-21T10:04:00Z' }], count: 1 };

function show(over = {}, m = metrics(20), files: () => Promise<typeof FILES> = () => Promise.resolve(FILES)) {
  const refresh = vi.fn();
  vi.mocked(useTraining).mockReturnValue({
    training: training(over),
    events: [event(1, { status: 'queued', reason: 'created by alice' })],
    metrics: m,
    error: null,
    refresh,
  });
  vi.spyOn(endpoints, 'logs').mockResolvedValue({ offset: 0, next_offset: 12, size: 12, text: 'step 1 loss\n' });
  vi.spyOn(endpoints, 'history').mockResolvedValue(history());
  vi.spyOn(endpoints, 'trainingFiles').mockImplementation(files);
  render(
    <MemoryRouter initialEntries={['/trainings/t1']}>
      <Routes>
        <Route path="/trainings/:id" element={<TrainingDetailPage />} />
      </Routes>
    </MemoryRouter>,
  );
  return { refresh };
}

describe('TrainingDetailPage', () => {
  beforeEach(() => vi.mocked(useTraining).mockReset());

  it('draws the loss and its parts, throughput and per-rank step times with the straggler marked', async () => {
    show();
    expect(screen.getByTestId('loss-chart')).toHaveAttribute('data-points', '20');
    expect(screen.getByTestId('throughput-chart')).toHaveAttribute('data-points', '20');
    expect(screen.getByTestId('rank-times')).toHaveTextContent('r1 slow');
    expect(screen.getByTestId('last-loss')).toHaveTextContent('0.05000');
    expect(screen.getByTestId('events')).toHaveTextContent('created by alice');
    await waitFor(() => expect(screen.getByTestId('log')).toHaveTextContent('step 1 loss'));
  });

  it('says a finished script reported no metrics instead of empty charts and 0 / ?', () => {
    show({ kind: 'script', status: 'succeeded', step: 0, max_steps: null, argv: ['python', 'train.py'] }, []);
    expect(screen.getByTestId('no-metrics')).toHaveTextContent('No metrics were reported');
    expect(screen.getByTestId('no-metrics')).toHaveTextContent('gpufleet.report()');
    expect(screen.getByTestId('no-steps')).toHaveTextContent('no steps reported');
    expect(screen.queryByText('0 / ?')).toBeNull();
    expect(screen.queryByTestId('loss-chart')).toBeNull();
    expect(screen.queryByText('Throughput')).toBeNull();
  });

  it('cancels after confirmation', async () => {
    const { refresh } = show();
    const cancel = vi.spyOn(endpoints, 'cancelTraining').mockResolvedValue(training({ status: 'cancelled' }));
    await userEvent.click(screen.getByRole('button', { name: 'Cancel training' }));
    expect(cancel).not.toHaveBeenCalled();
    await userEvent.click(screen.getByRole('button', { name: 'Yes, cancel it' }));
    expect(cancel).toHaveBeenCalledWith(training().id);
    expect(refresh).toHaveBeenCalled();
  });

  it('offers no cancel for a finished training and shows why it failed', () => {
    show({ status: 'failed', status_reason: 'rank 1 ran out of memory', finished_at: '2026-11-21T10:05:00Z' });
    expect(screen.queryByRole('button', { name: 'Cancel training' })).toBeNull();
    expect(screen.getByText('rank 1 ran out of memory')).toBeInTheDocument();
  });

  it('shows a script training: its command and code, the reported loss curve and the ranks\' log', async () => {
    show(
      { kind: 'script', recipe: 'script', argv: ['python', 'train.py', '--lr', '3e-4'], code_hash: 'ab12'.repeat(16), max_steps: null },
      metrics(12),
    );
    vi.spyOn(endpoints, 'logs').mockResolvedValue({ offset: 0, next_offset: 20, size: 20, text: '[rank 1] step 3 loss\n' });
    expect(screen.getByTestId('script-command')).toHaveTextContent('python train.py --lr 3e-4');
    expect(screen.getByTestId('script-command')).toHaveTextContent('code ab12ab12ab12');
    expect(screen.queryByText('Recipe')).toBeNull();
    expect(screen.getByTestId('loss-chart')).toHaveAttribute('data-points', '12');
  });

  it('resumes an ended training from its newest checkpoint, and offers no resume while it runs', async () => {
    const { refresh } = show({ status: 'cancelled', finished_at: '2026-11-21T10:05:00Z' });
    const resume = vi.spyOn(endpoints, 'resumeTraining').mockResolvedValue(training({ status: 'queued' }));
    await userEvent.click(screen.getByRole('button', { name: 'Resume' }));
    expect(resume).toHaveBeenCalledWith(training().id);
    expect(refresh).toHaveBeenCalled();
  });

  it('has no resume button for a running training', () => {
    show({ status: 'running' });
    expect(screen.queryByRole('button', { name: 'Resume' })).toBeNull();
  });

  it('lists the files with a download link each', async () => {
    show();
    const link = await screen.findByRole('link', { name: 'checkpoints/step-000010.pt' });
    expect(link).toHaveAttribute('href', `/api/v1/trainings/${training().id}/files/checkpoints/step-000010.pt`);
    expect(screen.getByTestId('training-files')).toHaveTextContent('2 KiB');
  });

  it('says that only the owner and admins see the files when the server refuses them', async () => {
    show({}, metrics(5), () => Promise.reject(new ApiError(403, 'only its owner and admins')));
    expect(await screen.findByText('Only its owner and admins see its files.')).toBeInTheDocument();
  });

  it('charts any reported series the user picks, and throughput from tokens/s', async () => {
    const m = Array.from({ length: 8 }, (_, i) => metric(i + 1, 1 / (i + 1), { metrics: { lr: 0.01 * (i + 1), acc: 0.5, tokens_per_s: 4000 } }));
    show({}, m);
    const picker = screen.getByTestId('series-picker') as HTMLSelectElement;
    expect([...picker.options].map((o) => o.value)).toEqual(['lr', 'acc', 'tokens_per_s']);
    expect(picker.value).toBe('lr');
    await userEvent.selectOptions(picker, 'acc');
    expect(picker.value).toBe('acc');
    expect(screen.getByTestId('series-chart')).toHaveAttribute('data-points', '8');
    expect(screen.getByTestId('throughput-chart')).toHaveAttribute('data-points', '8');
    expect(screen.getByText('Tokens/s')).toBeInTheDocument();
  });
});

describe('TrainingDetailPage charts and queue', () => {
  beforeEach(() => vi.mocked(useTraining).mockReset());

  it('draws accuracy on a chart of its own, not on the loss axis', () => {
    const m = Array.from({ length: 10 }, (_, i) => metric(i + 1, 2 / (i + 1), { metrics: { cross_entropy: 2 / (i + 1), accuracy: 0.1 * i } }));
    show({}, m);
    expect(screen.getByTestId('loss-chart').getAttribute('data-series')).toBe('cross_entropy|loss (total)');
    expect(screen.getByTestId('score-chart').getAttribute('data-series')).toBe('accuracy');
  });

  it('shows a queued training its place in the queue', () => {
    show({ status: 'queued', queue_position: 3, wait_reason: 'behind urgent (priority 5)' }, []);
    expect(screen.getByTestId('training-status')).toHaveTextContent('#3 in queue');
    expect(screen.getByTestId('training-status')).not.toHaveTextContent('starts');
  });

  it('shows the training served next when it is expected to start', () => {
    const soon = new Date(Date.now() + 12 * 60 * 1000 + 30 * 1000).toISOString();
    show({ status: 'queued', queue_position: 1, expected_start: soon, wait_reason: 'waits for 2 GPUs' }, []);
    expect(screen.getByTestId('training-status')).toHaveTextContent(/#1 in queue · starts in about 12m \d\ds/);
  });
});
