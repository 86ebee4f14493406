import { render, screen } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import { Chart, stepLabels } from './Chart';

describe('Chart', () => {
  it('breaks a time series where samples stop for a while', () => {
    const xs = [0, 10, 20, 30, 900, 910, 920];
    render(<Chart series={[{ label: 'util', color: '#fff' }]} data={[xs, [1, 2, 3, 4, 5, 6, 7]]} height={100} testId="c" />);
    expect(screen.getByTestId('c')).toHaveAttribute('data-points', '7');
    expect(screen.getByTestId('c')).toHaveAttribute('data-gaps', '1');
  });

  it('never adds gaps to a chart over steps', () => {
    render(<Chart series={[{ label: 'loss', color: '#fff' }]} data={[[1, 2, 3, 500], [1, 1, 1, 1]]} height={100} time={false} testId="c" />);
    expect(screen.getByTestId('c')).toHaveAttribute('data-gaps', '0');
  });

  it('draws each series over steps through its own points, never breaking where another has a point', () => {
    // Two trials that reported at different steps: each column lacks the other's steps.
    const data = [[5, 10, 15, 20], [1.0, null, 0.8, null], [null, 0.9, null, 0.7]];
    render(<Chart series={[{ label: 'trial 0', color: '#fff' }, { label: 'trial 1', color: '#f00' }]} data={data} height={100} time={false} testId="c" />);
    expect(screen.getByTestId('c')).toHaveAttribute('data-breaks', '0');
  });

  it('still breaks a time series where samples stop', () => {
    render(<Chart series={[{ label: 'util', color: '#fff' }]} data={[[0, 10, 20, 30, 900, 910], [1, 2, 3, 4, 5, 6]]} height={100} testId="c" />);
    expect(screen.getByTestId('c')).toHaveAttribute('data-breaks', '1');
  });

  it('labels whole steps only', () => {
    expect(stepLabels([0, 2.5, 5, 7.5, 10])).toEqual(['0', '', '5', '', '10']);
  });
});
