import { render, screen } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import { Chart } from './Chart';

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
});
