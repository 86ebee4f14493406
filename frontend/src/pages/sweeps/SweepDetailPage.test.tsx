import { render, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { MemoryRouter, Route, Routes } from 'react-router-dom';
import { describe, expect, it, vi } from 'vitest';
import { endpoints } from '../../api/endpoints';
import type { SweepCurves, SweepDetail, SweepTrial } from '../../api/types';
import { BEST_COLOR, colorOf, dashOf, overlay, parallelText, scatter } from './sweeps';
import { SweepDetailPage } from './SweepDetailPage';

function trial(number: number, lr: number, hidden: number[], state: SweepTrial['state'], metric: number | null): SweepTrial {
  return {
    number, params: { lr, hidden }, state, metric, metric_step: 8, rung: null, reason: `trial ${number} reason`,
    oom_retried: false, training_id: `00000000-0000-0000-0000-00000000000${number}`, training_status: 'succeeded',
    host: 'box', gpu_ids: [number % 2], step: 8, max_steps: 8,
  };
}

const TRIALS = [
  trial(0, 0.1, [8], 'complete', 0.5),
  trial(1, 0.01, [8], 'complete', 0.2),
  { ...trial(2, 0.001, [16], 'pruned', 0.9), rung: 0, reason: 'stopped at rung 0 (step 2): its loss 0.9 was not in the best 1/3 there' },
];

function detail(over: Partial<SweepDetail> = {}): SweepDetail {
  return {
    id: 'aaaaaaaa-0000-0000-0000-000000000000', name: 'lr-width', owner: 'ann', status: 'running', status_reason: null,
    method: 'grid', early_stopping: true, metric: 'loss', direction: 'minimize', parallel: 2, total_trials: 3,
    trials_by_state: { complete: 2, pruned: 1 }, best_trial: 1, created_at: '2026-11-25T16:00:00Z', finished_at: null,
    spec: {}, trials: TRIALS, best: TRIALS[1], ...over,
  };
}

const CURVES: SweepCurves = {
  metric: 'loss',
  data: [
    { number: 0, training_id: TRIALS[0].training_id!, points: [[1, 1.0], [8, 0.5]] },
    { number: 1, training_id: TRIALS[1].training_id!, points: [[1, 0.9], [4, 0.4], [8, 0.2]] },
    { number: 2, training_id: TRIALS[2].training_id!, points: [] },
  ],
};

function show() {
  render(
    <MemoryRouter initialEntries={['/sweeps/aaaaaaaa-0000-0000-0000-000000000000']}>
      <Routes>
        <Route path="/sweeps/:id" element={<SweepDetailPage />} />
      </Routes>
    </MemoryRouter>,
  );
}

describe('SweepDetailPage', () => {
  it('shows the trials, the best one, a scatter per parameter, and cancels', async () => {
    vi.spyOn(endpoints, 'sweep').mockResolvedValue(detail());
    vi.spyOn(endpoints, 'sweepCurves').mockResolvedValue(CURVES);
    const cancel = vi.spyOn(endpoints, 'cancelSweep').mockResolvedValue(detail({ status: 'cancelled' }));
    show();
    const table = await screen.findByTestId('trials-table');
    const rows = within(table).getAllByRole('row');
    expect(rows).toHaveLength(1 + 3);
    expect(within(rows[2]).getByText('0.01')).toBeInTheDocument();
    expect(within(rows[2]).getByText('box:1')).toBeInTheDocument();
    expect(within(rows[3]).getByText('pruned')).toBeInTheDocument();
    // The rung and the reason of the stop are in the row, not only in a tooltip.
    const head = within(rows[0]).getAllByRole('columnheader').map((h) => h.textContent);
    const cells = within(rows[3]).getAllByRole('cell');
    expect(cells[head.indexOf('Rung')]).toHaveTextContent(/^0$/);
    expect(cells[head.indexOf('Reason')]).toHaveTextContent('stopped at rung 0 (step 2)');
    expect(rows[2]).toHaveClass('row-best');
    expect(screen.getByTestId('sweep-best')).toHaveTextContent('Best: trial 1');
    expect(screen.getByTestId('sweep-best')).toHaveTextContent('lr=0.01, hidden=[8]');
    const lr = screen.getByTestId('scatter-lr');
    expect(lr.querySelectorAll('circle')).toHaveLength(3);
    expect(lr).toHaveTextContent('(log scale)');
    expect(screen.getByTestId('scatter-hidden').querySelectorAll('text')[0]).toHaveTextContent('[8]');
    await userEvent.click(screen.getByRole('button', { name: 'Cancel sweep' }));
    await waitFor(() => expect(cancel).toHaveBeenCalledWith('aaaaaaaa-0000-0000-0000-000000000000'));
  });

  it('lays the curves on one step axis and places list values by position', () => {
    const o = overlay(CURVES);
    expect(o.numbers).toEqual([0, 1]);
    expect(o.data).toEqual([[1, 4, 8], [1.0, null, 0.5], [0.9, 0.4, 0.2]]);
    const s = scatter(TRIALS, 'hidden');
    expect(s.ticks).toEqual(['[8]', '[16]']);
    expect(s.points.map((p) => p.x)).toEqual([0, 0, 1]);
    expect(scatter(TRIALS, 'lr').log).toBe(true);
  });

  it('gives every trial of a large sweep its own colour, none the best one\'s green', () => {
    const colours = Array.from({ length: 200 }, (_, i) => colorOf(i));
    expect(new Set(colours).size).toBe(200);
    expect(colours[10]).not.toBe(colours[0]); // a palette of ten came round again here
    // Trials eight apart have near hues: their lightness differs.
    expect(colours[8].split(',')[2]).not.toBe(colours[0].split(',')[2]);
    for (const c of colours) {
      const hue = Number(c.match(/^hsl\(([\d.]+),/)![1]);
      expect(hue < 85 || hue >= 180).toBe(true); // greens (the best line's #16a34a is 142) are left out
    }
    expect(colours).not.toContain(BEST_COLOR);
    expect([dashOf(0), dashOf(1), dashOf(2)]).toEqual([undefined, [6, 3], [2, 3]]);
  });

  it('says a sweep whose parallel is not below its trial count runs them all at once', async () => {
    expect(parallelText(3, 8)).toBe('3 trials, all at once');
    expect(parallelText(3, 3)).toBe('3 trials, all at once');
    expect(parallelText(32, 8)).toBe('32 trials, 8 at a time');
    expect(parallelText(1, 4)).toBe('1 trial');
    vi.spyOn(endpoints, 'sweep').mockResolvedValue(detail({ parallel: 8 }));
    vi.spyOn(endpoints, 'sweepCurves').mockResolvedValue(CURVES);
    show();
    const page = await screen.findByTestId('sweep-page');
    expect(page).toHaveTextContent('3 trials, all at once');
    expect(page).not.toHaveTextContent('at a time');
  });
});
