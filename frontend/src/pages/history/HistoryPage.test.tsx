import { render, screen, waitFor } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { MemoryRouter } from 'react-router-dom';
import { describe, expect, it, vi } from 'vitest';
import { endpoints } from '../../api/endpoints';
import { gpu, history } from '../../test/factories';
import { useFleet } from '../fleet/useFleet';
import { HistoryPage } from './HistoryPage';

vi.mock('../fleet/useFleet', () => ({ useFleet: vi.fn() }));

const point = { t: '2026-11-21T10:00:00Z', samples: 60, utilization_avg: 40, utilization_min: 10, utilization_max: 90 };

function setup(path = '/history') {
  const gpus = [gpu('h', 0), gpu('h', 1)];
  vi.mocked(useFleet).mockReturnValue({ data: { data: gpus, count: 2, simulated: true }, error: null, loading: false, reload: vi.fn(), gpus, byHost: [['h', gpus]], simulated: true });
  const hist = vi.spyOn(endpoints, 'history').mockResolvedValue(history([{ host: null, gpu_index: null, points: [point] }]));
  render(
    <MemoryRouter initialEntries={[path]}>
      <HistoryPage />
    </MemoryRouter>,
  );
  return hist;
}

describe('HistoryPage', () => {
  it('shows the aggregate of the last hour by default, then a chosen GPU and range', async () => {
    const hist = setup();
    await screen.findByTestId('history-charts');
    const first = hist.mock.calls[0][0];
    expect(first).toMatchObject({ aggregate: true, points: 500 });
    expect(Date.parse(first.to) - Date.parse(first.from)).toBe(3600_000);
    expect(screen.getByTestId('history-utilization')).toHaveAttribute('data-points', '1');

    await userEvent.selectOptions(screen.getByLabelText('GPU'), 'h:1');
    await waitFor(() => expect(hist.mock.lastCall![0]).toMatchObject({ gpu: 'h:1' }));
    await userEvent.click(screen.getByRole('button', { name: 'Last week' }));
    await waitFor(() => {
      const q = hist.mock.lastCall![0];
      expect(Date.parse(q.to) - Date.parse(q.from)).toBe(7 * 86400_000);
    });
    expect(screen.getByRole('button', { name: 'Last week' })).toHaveAttribute('aria-pressed', 'true');
  });

  it('says so when the range holds no samples', async () => {
    vi.mocked(useFleet).mockReturnValue({ data: undefined, error: null, loading: true, reload: vi.fn(), gpus: [], byHost: [], simulated: false });
    vi.spyOn(endpoints, 'history').mockResolvedValue(history([{ host: 'h', gpu_index: 0, points: [] }]));
    render(
      <MemoryRouter initialEntries={['/history?gpu=h:0&range=24h']}>
        <HistoryPage />
      </MemoryRouter>,
    );
    expect(await screen.findByText('No samples in this range.')).toBeInTheDocument();
  });
});
