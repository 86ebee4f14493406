import { render, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { MemoryRouter } from 'react-router-dom';
import { describe, expect, it, vi } from 'vitest';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import { session } from '../../test/factories';
import { SessionsPage } from './SessionsPage';

const page = (at = '/sessions') =>
  render(
    <MemoryRouter initialEntries={[at]}>
      <SessionsPage />
    </MemoryRouter>,
  );

const viewer = (name: string, role: 'admin' | 'member') =>
  vi.spyOn(endpoints, 'whoami').mockResolvedValue({ name, role, auth_required: true, via: 'session' } as never);

describe('SessionsPage', () => {
  it('lists sessions with status, GPUs, host and owner; a running notebook opens on its own origin', async () => {
    viewer('alice', 'member');
    const nb = session();
    const queued = session({ id: 'q1', name: 'waiting', status: 'queued', gpu_ids: null, host: null, url: null, shell: null, wait_reason: 'quota: 4 GPUs in use' });
    vi.spyOn(endpoints, 'sessions').mockResolvedValue({ items: [nb, queued], total: 2 } as never);
    page();
    const row = await screen.findByTestId(`session-row-${nb.id}`);
    expect(row).toHaveTextContent('running');
    expect(row).toHaveTextContent('sim-host: 1');
    expect(row).toHaveTextContent('alice');
    expect(row).toHaveTextContent('active');
    const link = `http://127.0.0.1:8001/sessions/${nb.id}/?gpufleet_ticket=t`;
    const opened = vi.spyOn(endpoints, 'openSession').mockResolvedValue({ url: link, expires_in_s: 60 } as never);
    const tab = { opener: {} as unknown, location: { href: '' }, close: vi.fn() };
    const popup = vi.spyOn(window, 'open').mockReturnValue(tab as unknown as Window);
    await userEvent.click(within(row).getByRole('button', { name: 'Open' }));
    // A tab at the click, with no handle on the dashboard, sent to the single-use address once it is made.
    expect(popup).toHaveBeenCalledWith('', '_blank');
    expect(opened).toHaveBeenCalledWith(nb.id);
    await waitFor(() => expect(tab.location.href).toBe(link));
    expect(tab.opener).toBeNull();
    const waiting = screen.getByTestId('session-row-q1');
    expect(waiting).toHaveTextContent('quota: 4 GPUs in use');
    expect(within(waiting).queryByRole('button', { name: 'Open' })).toBeNull();
    expect(within(waiting).queryByRole('button', { name: 'Extend' })).toBeNull();
    expect(within(waiting).getByRole('button', { name: 'Stop' })).toBeEnabled();
  });

  it('stops and extends a session, then reloads; a refusal is shown on its row', async () => {
    const nb = session();
    const list = vi.spyOn(endpoints, 'sessions').mockResolvedValue({ items: [nb], total: 1 } as never);
    const stop = vi.spyOn(endpoints, 'stopSession').mockResolvedValue(session({ status: 'stopping' }) as never);
    const extend = vi.spyOn(endpoints, 'extendSession').mockRejectedValueOnce(new ApiError(422, 'past the maximum of 24 h'));
    page();
    const row = await screen.findByTestId(`session-row-${nb.id}`);
    await userEvent.click(within(row).getByRole('button', { name: 'Extend' }));
    expect(extend).toHaveBeenCalledWith(nb.id, 1);
    expect(await within(row).findByRole('alert')).toHaveTextContent('past the maximum of 24 h');
    const calls = list.mock.calls.length;
    await userEvent.click(within(row).getByRole('button', { name: 'Stop' }));
    expect(stop).toHaveBeenCalledWith(nb.id);
    await waitFor(() => expect(list.mock.calls.length).toBeGreaterThan(calls));
  });

  it('shows the shell command of a shell session, and the idle countdown', async () => {
    const sh = session({ mode: 'shell', url: null, host: 'gpu-7', idle_since: new Date(Date.now() - 600_000).toISOString(), idle_stop_at: new Date(Date.now() + 300_000).toISOString() });
    vi.spyOn(endpoints, 'sessions').mockResolvedValue({ items: [sh], total: 1 } as never);
    page();
    const row = await screen.findByTestId(`session-row-${sh.id}`);
    expect(within(row).getByTestId('shell-command')).toHaveTextContent(`ssh -t gpu-7 gpufleet session shell ${sh.id}`);
    expect(row).toHaveTextContent(/idle 10m \d\ds, stops in [45]m/);
    expect(within(row).queryByRole('button', { name: 'Open' })).toBeNull();
  });

  it('filters by status and says when nothing matches', async () => {
    const list = vi.spyOn(endpoints, 'sessions').mockResolvedValue({ items: [], total: 0 } as never);
    page();
    expect(await screen.findByText('No sessions yet.')).toBeInTheDocument();
    await userEvent.selectOptions(screen.getByLabelText('Status'), 'running');
    await waitFor(() => expect(list).toHaveBeenLastCalledWith(expect.objectContaining({ status: 'running' }), expect.anything()));
    expect(await screen.findByText('No session matches these filters.')).toBeInTheDocument();
  });

  it("offers an admin Join, not Open, on another member's notebook, and joins by that explicit step", async () => {
    viewer('root', 'admin');
    const nb = session();
    vi.spyOn(endpoints, 'sessions').mockResolvedValue({ items: [nb], total: 1 } as never);
    const opened = vi.spyOn(endpoints, 'openSession');
    const joined = vi.spyOn(endpoints, 'joinSession').mockResolvedValue({ url: 'http://x.nb.localhost:8001/', expires_in_s: 60 } as never);
    const tab = { opener: {} as unknown, location: { href: '' }, close: vi.fn() };
    vi.spyOn(window, 'open').mockReturnValue(tab as unknown as Window);
    page();
    const row = await screen.findByTestId(`session-row-${nb.id}`);
    const join = await within(row).findByRole('button', { name: 'Join' });
    expect(join).toHaveAttribute('title', expect.stringContaining('recorded on the session'));
    expect(within(row).queryByRole('button', { name: 'Open' })).toBeNull();
    await userEvent.click(join);
    expect(joined).toHaveBeenCalledWith(nb.id);
    expect(opened).not.toHaveBeenCalled();
    await waitFor(() => expect(tab.location.href).toBe('http://x.nb.localhost:8001/'));
  });

  it('a notebook sent back for a fresh ticket opens again at once; a joined one only by a click', async () => {
    viewer('alice', 'member');
    vi.spyOn(endpoints, 'sessions').mockResolvedValue({ items: [], total: 0 } as never);
    const replace = vi.fn();
    vi.stubGlobal('location', { ...window.location, replace });
    const opened = vi.spyOn(endpoints, 'openSession').mockResolvedValue({ url: 'http://s1.nb.localhost:8001/t', expires_in_s: 60 } as never);
    const first = page('/sessions?open=s1');
    await waitFor(() => expect(replace).toHaveBeenCalledWith('http://s1.nb.localhost:8001/t'));
    expect(opened).toHaveBeenCalledWith('s1');
    first.unmount();
    const joined = vi.spyOn(endpoints, 'joinSession').mockResolvedValue({ url: 'http://s2.nb.localhost:8001/t', expires_in_s: 60 } as never);
    page('/sessions?open=s2&join=1');
    const step = await screen.findByTestId('open-step');
    expect(step).toHaveTextContent('recorded on the session');
    expect(joined).not.toHaveBeenCalled();
    await userEvent.click(within(step).getByRole('button', { name: 'Join' }));
    await waitFor(() => expect(replace).toHaveBeenCalledWith('http://s2.nb.localhost:8001/t'));
    vi.unstubAllGlobals();
  });
});
