import { render, screen, waitFor } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { MemoryRouter } from 'react-router-dom';
import { describe, expect, it, vi } from 'vitest';
import { endpoints } from '../../api/endpoints';
import { training } from '../../test/factories';
import { Progress, TrainingsPage } from './TrainingsPage';

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

  it("shows a script that never gave its total as done once it succeeded, and '?' while it runs", () => {
    const { rerender } = render(<Progress t={{ step: 400, max_steps: null, status: 'running' }} />);
    expect(screen.getByText('400 / ?')).toBeInTheDocument();
    rerender(<Progress t={{ step: 400, max_steps: null, status: 'succeeded' }} />);
    expect(screen.getByText('400 / 400')).toBeInTheDocument();
    expect(screen.getByRole('progressbar')).toHaveAttribute('aria-valuemax', '400');
  });

  it('counts a finished script that numbered its steps from 0 as all done, and a running one as it reported', () => {
    const { rerender } = render(<Progress t={{ step: 599, max_steps: 600, status: 'running' }} />);
    expect(screen.getByText('599 / 600')).toBeInTheDocument();
    rerender(<Progress t={{ step: 599, max_steps: 600, status: 'succeeded' }} />);
    expect(screen.getByText('600 / 600')).toBeInTheDocument();
    rerender(<Progress t={{ step: 300, max_steps: 600, status: 'succeeded' }} />);
    expect(screen.getByText('300 / 600')).toBeInTheDocument();
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

  it('shows a queued training its place in the queue and filters to my own trainings', async () => {
    vi.spyOn(endpoints, 'whoami').mockResolvedValue({ name: 'carol', role: 'user', via: 'token', auth_required: true } as never);
    const list = vi.spyOn(endpoints, 'trainings').mockResolvedValue({ data: [training({ status: 'queued', queue_position: 2, gpu_ids: null, host_name: null })], count: 1 });
    render(
      <MemoryRouter>
        <TrainingsPage />
      </MemoryRouter>,
    );
    const row = await screen.findByTestId(`training-row-${training().id}`);
    expect(row).toHaveTextContent('#2 in queue');
    const mine = screen.getByLabelText('Only mine');
    await waitFor(() => expect(mine).toBeEnabled());
    await userEvent.click(mine);
    await waitFor(() => expect(list).toHaveBeenLastCalledWith(expect.objectContaining({ owner: 'carol' }), expect.anything()));
    expect(screen.getByLabelText('Owner')).toHaveValue('carol');
    await userEvent.click(mine);
    await waitFor(() => expect(list).toHaveBeenLastCalledWith(expect.objectContaining({ owner: undefined }), expect.anything()));
  });
});
