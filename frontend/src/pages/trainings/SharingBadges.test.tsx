import { render, screen } from '@testing-library/react';
import { MemoryRouter } from 'react-router-dom';
import { describe, expect, it, vi } from 'vitest';
import { endpoints } from '../../api/endpoints';
import { training } from '../../test/factories';
import { SharingBadges } from './SharingBadges';
import { TrainingsPage } from './TrainingsPage';

const OTHER = '9a8b7c6d-0000-4000-8000-000000000002';

describe('SharingBadges', () => {
  it('marks a running training whose GPUs sit idle, once it was warned', () => {
    const { rerender } = render(<SharingBadges t={training({ idle_since: '2026-11-21T10:00:00Z' })} />);
    expect(screen.queryByTestId('badge-idle')).toBeNull();
    rerender(<SharingBadges t={training({ idle_since: '2026-11-21T10:00:00Z', idle_warned_at: '2026-11-21T10:30:00Z' })} />);
    expect(screen.getByTestId('badge-idle')).toHaveTextContent('idle');
    // A reclaimed training is no longer holding anything: the state says it all.
    rerender(<SharingBadges t={training({ status: 'reclaimed', idle_warned_at: '2026-11-21T10:30:00Z' })} />);
    expect(screen.queryByTestId('badge-idle')).toBeNull();
  });

  it('says which training a preempted one makes room for', () => {
    const { rerender } = render(<SharingBadges t={training({ preempted_by: OTHER })} />);
    expect(screen.getByTestId('badge-preempted-by')).toHaveTextContent('making room for 9a8b7c6d');
    rerender(<SharingBadges t={training({ status: 'preempted', preempted_by: OTHER })} />);
    expect(screen.getByTestId('badge-preempted-by')).toHaveTextContent('GPUs kept for 9a8b7c6d');
    rerender(<SharingBadges t={training({ status: 'queued', preempted_by: null })} />);
    expect(screen.queryByTestId('badge-preempted-by')).toBeNull();
  });

  it('shows the preempted and reclaimed states and the idle badge in the trainings list', async () => {
    const rows = [
      training({ id: OTHER, name: 'kept', status: 'preempted', preempted_by: '3f1c2a4e-0000-4000-8000-000000000001' }),
      training({ id: '11111111-0000-4000-8000-000000000003', name: 'gone', status: 'reclaimed', status_reason: 'reclaimed: its GPUs stayed idle' }),
      training({ idle_warned_at: '2026-11-21T10:30:00Z' }),
    ];
    vi.spyOn(endpoints, 'trainings').mockResolvedValue({ data: rows, count: rows.length });
    render(
      <MemoryRouter>
        <TrainingsPage />
      </MemoryRouter>,
    );
    const kept = await screen.findByTestId(`training-row-${OTHER}`);
    expect(kept.querySelector('.pill-preempted')).toHaveTextContent('preempted');
    expect(kept).toHaveTextContent('GPUs kept for 3f1c2a4e');
    const gone = screen.getByTestId('training-row-11111111-0000-4000-8000-000000000003');
    expect(gone.querySelector('.pill-reclaimed')).toHaveAttribute('title', 'reclaimed: its GPUs stayed idle');
    expect(screen.getByTestId(`training-row-${training().id}`)).toHaveTextContent('idle');
    const options = Array.from((screen.getByLabelText('Status') as HTMLSelectElement).options).map((o) => o.value);
    expect(options).toEqual(expect.arrayContaining(['preempted', 'reclaimed']));
  });
});
