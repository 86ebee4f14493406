import { render, screen } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { MemoryRouter, Route, Routes } from 'react-router-dom';
import { describe, expect, it, vi } from 'vitest';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import { session } from '../../test/factories';
import { NewSessionPage, toBody } from './NewSessionPage';

const page = () =>
  render(
    <MemoryRouter initialEntries={['/sessions/new']}>
      <Routes>
        <Route path="/sessions/new" element={<NewSessionPage />} />
        <Route path="/sessions" element={<div>sessions list</div>} />
      </Routes>
    </MemoryRouter>,
  );

describe('NewSessionPage', () => {
  it('starts a notebook session with the GPUs, memory and hours asked for, then shows the list', async () => {
    const create = vi.spyOn(endpoints, 'createSession').mockResolvedValue(session({ status: 'queued' }) as never);
    page();
    await userEvent.clear(screen.getByLabelText('GPUs'));
    await userEvent.type(screen.getByLabelText('GPUs'), '2');
    await userEvent.type(screen.getByLabelText('Memory per GPU (GiB)'), '20');
    await userEvent.clear(screen.getByLabelText('Hours'));
    await userEvent.type(screen.getByLabelText('Hours'), '2.5');
    await userEvent.click(screen.getByRole('button', { name: 'Start session' }));
    expect(create).toHaveBeenCalledWith({ gpus: 2, memory_mb: 20480, hours: 2.5, jupyter: true });
    expect(await screen.findByText('sessions list')).toBeInTheDocument();
  });

  it('says the notebook is JupyterLab and how a host gets it', () => {
    page();
    expect(screen.getByText(/JupyterLab, opened in the browser/)).toHaveTextContent("pip install 'gpufleet[sessions]'");
  });

  it('shows the shell and ssh commands after starting a shell session', async () => {
    const s = session({ mode: 'shell', status: 'queued', host: null, url: null, shell: null });
    const create = vi.spyOn(endpoints, 'createSession').mockResolvedValue(s as never);
    page();
    await userEvent.click(screen.getByLabelText('Shell'));
    await userEvent.click(screen.getByRole('button', { name: 'Start session' }));
    expect(create).toHaveBeenCalledWith(expect.objectContaining({ jupyter: false, memory_mb: null }));
    const started = await screen.findByTestId('shell-started');
    expect(started).toHaveTextContent(`gpufleet session shell ${s.id}`);
    expect(started).toHaveTextContent(`ssh -t <host> gpufleet session shell ${s.id}`);
  });

  it('refuses bad values before sending, and shows the server refusal', async () => {
    const create = vi.spyOn(endpoints, 'createSession').mockRejectedValue(new ApiError(422, 'hours: past your maximum of 24', { hours: 'past your maximum of 24' }));
    page();
    await userEvent.clear(screen.getByLabelText('GPUs'));
    await userEvent.type(screen.getByLabelText('GPUs'), '0');
    expect(screen.getByText('a whole number from 1 to 64')).toBeInTheDocument();
    expect(screen.getByRole('button', { name: 'Start session' })).toBeDisabled();
    await userEvent.type(screen.getByLabelText('GPUs'), '1');
    await userEvent.click(screen.getByRole('button', { name: 'Start session' }));
    expect(create).toHaveBeenCalledTimes(1);
    expect(await screen.findByRole('alert')).toHaveTextContent('past your maximum of 24');
    expect(screen.getByText('past your maximum of 24')).toBeInTheDocument();
  });

  it('reads the form into the API body', () => {
    expect(toBody({ gpus: '1', memoryGiB: '', hours: '4', mode: 'shell' }).body).toEqual({ gpus: 1, memory_mb: null, hours: 4, jupyter: false });
    expect(toBody({ gpus: '1.5', memoryGiB: '-1', hours: '0', mode: 'jupyter' }).errors).toEqual({
      gpus: 'a whole number from 1 to 64',
      memory_mb: 'a size in GiB above 0, or empty for whole GPUs',
      hours: 'hours above 0',
    });
  });
});
