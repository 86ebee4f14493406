import { render, screen } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import type { TrainingEvent } from '../../api/types';
import { StartupTable } from './StartupTable';

const ev = (seq: number, data: Record<string, unknown> | null): TrainingEvent =>
  ({ seq, kind: 'info', reason: 'x', status: null, data, time: '2026-11-25T12:00:00Z' }) as TrainingEvent;

describe('StartupTable', () => {
  it('shows each rank’s start-up phases and their total', () => {
    const phases = ['launcher', 'imports', 'device', 'process_group', 'model', 'first_step'];
    const events = [
      ev(1, { world_size: 2 }),
      ev(2, { startup: { phases, per_rank: [[0.5, 3.25, 0.1, 1, 0.4, 0.75], [0.6, 3.5, 0.1, 1, 0.4, 0.8]] } }),
    ];
    render(<StartupTable events={events} />);
    expect(screen.getByTestId('startup-imports')).toHaveTextContent('Interpreter + imports3.25 s3.50 s');
    expect(screen.getByTestId('startup-process_group')).toHaveTextContent('Process group1.00 s1.00 s');
    expect(screen.getByTestId('startup-total')).toHaveTextContent('Total6.00 s6.40 s');
  });

  it('shows nothing before the first report', () => {
    const { container } = render(<StartupTable events={[ev(1, null)]} />);
    expect(container).toBeEmptyDOMElement();
  });
});
