import { render, screen, waitFor } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { MemoryRouter } from 'react-router-dom';
import { describe, expect, it, vi } from 'vitest';
import { endpoints } from '../../api/endpoints';
import { training } from '../../test/factories';
import { TrainingsPage } from './TrainingsPage';

describe('TrainingsPage', () => {
  it('lists trainings with status, progress, GPUs and owner, and filters by status and owner', async () => {
    const list = vi.spyOn(endpoints, 'trainings').mockResolvedValue({ data: [training({ step: 25, max_steps: 100 })], count: 1 });
    render(
      <MemoryRouter>
        <TrainingsPage />
      </MemoryRouter>,
    );
    const row = await screen.findByTestId(`training-row-${training().id}`);
    expect(row).toHaveTextContent('sae-run');
    expect(row).toHaveTextContent('running');
    expect(row).toHaveTextContent('25 / 100');
    expect(row).toHaveTextContent('sim-host: 0, 1');
    expect(row).toHaveTextContent('alice');
    await userEvent.selectOptions(screen.getByLabelText('Status'), 'failed');
    await waitFor(() => expect(list).toHaveBeenLastCalledWith(expect.objectContaining({ status: 'failed' }), expect.anything()));
    await userEvent.type(screen.getByLabelText('Owner'), 'bob');
    await waitFor(() => expect(list).toHaveBeenLastCalledWith(expect.objectContaining({ status: 'failed', owner: 'bob' }), expect.anything()));
  });

  it('says when nothing matches', async () => {
    vi.spyOn(endpoints, 'trainings').mockResolvedValue({ data: [], count: 0 });
    render(
      <MemoryRouter initialEntries={['/trainings?status=failed']}>
        <TrainingsPage />
      </MemoryRouter>,
    );
    expect(await screen.findByText('No training matches these filters.')).toBeInTheDocument();
  });
});
