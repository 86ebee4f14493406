import { act, render, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { MemoryRouter } from 'react-router-dom';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import { gpu, history } from '../../test/factories';
import { installFakeLive } from '../../test/fakeSocket';
import { aggregate } from './aggregate';
import { FleetPage } from './FleetPage';
import { useFleet } from './useFleet';

vi.mock('./useFleet', () => ({ useFleet: vi.fn() }));
vi.mock('./TopologyView', () => ({ TopologyView: () => <div data-testid="topology-view" /> }));

const GiB = 1024 ** 3;

function fleetOf(gpus: ReturnType<typeof gpu>[], over: Partial<ReturnType<typeof useFleet>> = {}) {
  const byHost = new Map<string, typeof gpus>();
  gpus.forEach((g) => byHost.set(g.host, [...(byHost.get(g.host) ?? []), g]));
  vi.mocked(useFleet).mockReturnValue({
    data: { data: gpus, count: gpus.length, simulated: true },
    error: null,
    loading: false,
    reload: vi.fn(),
    gpus,
    byHost: [...byHost.entries()],
    simulated: true,
    ...over,
  });
}

function renderPage(path = '/') {
  return render(
    <MemoryRouter initialEntries={[path]}>
      <FleetPage />
    </MemoryRouter>,
  );
}

describe('FleetPage', () => {
  beforeEach(() => vi.mocked(useFleet).mockReset());

  it('shows a card per GPU, grouped by host', () => {
    installFakeLive();
    fleetOf([gpu('a100-01', 0), gpu('a100-01', 1), gpu('b-02', 0)]);
    renderPage();
    expect(screen.getByTestId('gpu-total')).toHaveTextContent('3 GPUs on 2 hosts');
    const hostA = screen.getByRole('region', { name: 'Host a100-01' });
    expect(within(hostA).getAllByRole('article')).toHaveLength(2);
    expect(within(screen.getByRole('region', { name: 'Host b-02' })).getAllByRole('article')).toHaveLength(1);
  });

  it('names each GPU\'s vendor and backend, and shows a dash for what a vendor does not report', () => {
    installFakeLive();
    const intelLive = { ...gpu('mix', 2).live!, power_limit: null, power_draw: null, temperature: 51 };
    fleetOf([
      gpu('mix', 0),
      gpu('mix', 1, { vendor: 'amd', backend: 'hip', name: 'AMD Instinct MI300X', compute_capability: null }),
      gpu('mix', 2, { vendor: 'intel', backend: 'xpu', name: 'Intel(R) Data Center GPU Max 1550', compute_capability: null, live: intelLive }),
    ]);
    renderPage();
    const vendors = screen.getAllByTestId('gpu-vendor').map((e) => e.textContent);
    expect(vendors).toEqual(['NVIDIA · cuda', 'AMD · hip', 'Intel · xpu']);
    const intel = screen.getByTestId('gpu-card-mix-2');
    expect(within(intel).getByText('Intel(R) Data Center GPU Max 1550')).toBeInTheDocument();
    expect(within(intel).getByTitle('power draw / limit')).toHaveTextContent('Power —');
    expect(within(intel).getByTestId('gpu-temp')).toHaveTextContent('51');
  });

  it('shows who holds a GPU: the training and its owner, or the foreign process', () => {
    installFakeLive();
    const busy = gpu('h', 0, {
      availability: { state: 'busy', reason: 'held by sae-run', holders: [{ training_id: 'abcd1234-0000', training_name: 'sae-run', owner: 'alice' }] },
    });
    const foreign = gpu('h', 1, {
      availability: { state: 'foreign-busy', reason: 'pid 4242 (bob) holds 20 GiB', holders: [] },
      live: { ...gpu('h', 1).live!, processes: [{ pid: 4242, user: 'bob', command: '/usr/bin/python train.py', used_memory: 20 * GiB, foreign: true }] },
    });
    fleetOf([busy, foreign]);
    renderPage();
    const c0 = screen.getByTestId('gpu-card-h-0');
    expect(within(c0).getByRole('link', { name: 'sae-run' })).toHaveAttribute('href', '/trainings/abcd1234-0000');
    expect(c0).toHaveTextContent('alice');
    expect(c0).toHaveTextContent('busy');
    expect(c0).toHaveTextContent('training');
    const c1 = screen.getByTestId('gpu-card-h-1');
    expect(c1).toHaveTextContent('pid 4242');
    expect(c1).toHaveTextContent('bob');
    expect(c1).toHaveTextContent('python');
    expect(c1).toHaveTextContent('foreign');
  });

  it('calls a session a session on its card, and links to the sessions page', () => {
    installFakeLive();
    const held = gpu('h', 0, {
      availability: { state: 'busy', reason: 'held by session nb-1 of alice', holders: [{ training_id: 'feed0000-0000', training_name: 'nb-1', owner: 'alice', kind: 'session' }] },
    });
    fleetOf([held]);
    renderPage();
    const card = screen.getByTestId('gpu-card-h-0');
    expect(within(card).getByRole('link', { name: 'nb-1' })).toHaveAttribute('href', '/sessions');
    expect(within(card).getByText('session')).toHaveClass('holder-kind');
    expect(within(card).queryByText('training')).toBeNull();
  });

  it('subscribes to each card and shows live updates', () => {
    const { client, sockets } = installFakeLive();
    fleetOf([gpu('h', 0), gpu('h', 1)]);
    renderPage();
    expect(client.channels().sort()).toEqual(['gpu:h:0', 'gpu:h:1']);
    act(() => sockets[0].open());
    act(() =>
      sockets[0].push({
        type: 'update',
        channel: 'gpu:h:1',
        seq: 5,
        data: { timestamp: '2026-11-21T10:00:05Z', utilization: 87, memory_used: 60 * GiB, memory_total: 80 * GiB, temperature: 71, power_draw: 650, processes: [] },
      }),
    );
    const card = screen.getByTestId('gpu-card-h-1');
    expect(within(card).getByRole('meter', { name: 'Utilization' })).toHaveAttribute('aria-valuenow', '87');
    expect(within(card).getByTestId('gpu-temp')).toHaveTextContent('71°C');
    expect(within(card).getByTestId('gpu-chart-1')).toHaveAttribute('data-points', '1');
  });

  it('toggles to the aggregated view, which follows only aggregate and host channels', async () => {
    const { client } = installFakeLive();
    fleetOf([gpu('h', 0), gpu('h', 1)]);
    renderPage();
    await userEvent.click(screen.getByRole('button', { name: 'Aggregated' }));
    expect(screen.getByRole('button', { name: 'Aggregated' })).toHaveAttribute('aria-pressed', 'true');
    expect(screen.queryByTestId('gpu-view')).toBeNull();
    expect(screen.getByTestId('agg-gpu-count')).toHaveTextContent('2');
    expect(screen.getByTestId('host-row-h')).toBeInTheDocument();
    expect(client.channels().sort()).toEqual(['aggregate', 'host:h']);
    await userEvent.click(screen.getByRole('button', { name: 'Topology' }));
    expect(screen.getByTestId('topology-view')).toBeInTheDocument();
  });

  it('starts each mini chart from the stored last minutes', async () => {
    installFakeLive();
    const hist = vi.spyOn(endpoints, 'history').mockResolvedValue(
      history([
        {
          host: 'h',
          gpu_index: 1,
          points: [0, 1, 2].map((i) => ({ t: `2026-11-21T09:5${i}:00Z`, samples: 60, utilization_avg: 50 + i, memory_used_avg: 8 * GiB })),
        },
      ]),
    );
    fleetOf([gpu('h', 0), gpu('h', 1)]);
    renderPage();
    await waitFor(() => expect(screen.getByTestId('gpu-chart-1')).toHaveAttribute('data-points', '3'));
    expect(screen.getByTestId('gpu-chart-0')).toHaveAttribute('data-points', '0');
    expect(hist).toHaveBeenCalledTimes(1);
  });

  it('gives admins a drain button that drains the GPU and reloads the fleet; others get none', async () => {
    installFakeLive();
    const who = vi.spyOn(endpoints, 'whoami').mockResolvedValue({ name: 'root', role: 'admin', via: 'local', auth_required: false });
    const drain = vi.spyOn(endpoints, 'drain').mockResolvedValue({ host: 'h', index: 1, drained: true, reason: 'x', still_running: [] });
    const undrain = vi.spyOn(endpoints, 'undrain').mockResolvedValue({ host: 'h', index: 0, drained: false, reason: null, still_running: [] });
    const reload = vi.fn();
    fleetOf([gpu('h', 0, { drained: true }), gpu('h', 1)], { reload });
    const view = renderPage();
    const c1 = screen.getByTestId('gpu-card-h-1');
    await userEvent.click(await within(c1).findByRole('button', { name: 'Drain' }));
    expect(drain).toHaveBeenCalledWith('h', 1, expect.any(String));
    await waitFor(() => expect(reload).toHaveBeenCalled());
    await userEvent.click(within(screen.getByTestId('gpu-card-h-0')).getByRole('button', { name: 'Undrain' }));
    expect(undrain).toHaveBeenCalledWith('h', 0);
    view.unmount();
    who.mockResolvedValue({ name: 'bob', role: 'member', via: 'token', auth_required: true });
    renderPage();
    await waitFor(() => expect(who).toHaveBeenCalledTimes(2));
    expect(screen.queryByRole('button', { name: /drain/i })).toBeNull();
  });

  it('gives admins a clear-health button on a GPU marked unhealthy only, which clears it and reloads', async () => {
    installFakeLive();
    vi.spyOn(endpoints, 'whoami').mockResolvedValue({ name: 'root', role: 'admin', via: 'local', auth_required: false });
    const clear = vi.spyOn(endpoints, 'clearHealth').mockResolvedValue({ host: 'h', index: 0, status: 'ok', cleared: 'XID 79: fell off the bus' });
    const reload = vi.fn();
    fleetOf([gpu('h', 0, { status: 'unhealthy', status_reason: 'health: XID 79: fell off the bus' }), gpu('h', 1)], { reload });
    renderPage();
    const sick = screen.getByTestId('gpu-card-h-0');
    const button = await within(sick).findByRole('button', { name: 'Clear health' });
    expect(button).toHaveAttribute('title', expect.stringContaining('XID 79: fell off the bus'));
    expect(within(screen.getByTestId('gpu-card-h-1')).queryByRole('button', { name: 'Clear health' })).toBeNull();
    await userEvent.click(button);
    expect(clear).toHaveBeenCalledWith('h', 0);
    await waitFor(() => expect(reload).toHaveBeenCalled());
  });

  it('says so when no GPU is found', () => {
    installFakeLive();
    fleetOf([]);
    renderPage();
    expect(screen.getByText('No GPUs found.')).toBeInTheDocument();
    expect(screen.getByText(/GPUFLEET_SIMULATE/)).toBeInTheDocument();
  });

  it('says so when the server is unreachable', () => {
    installFakeLive();
    fleetOf([], { data: undefined, error: new ApiError(0, 'The gpufleet server cannot be reached.') });
    renderPage();
    expect(screen.getByRole('alert')).toHaveTextContent('Server unreachable');
    expect(screen.getByRole('button', { name: 'Retry' })).toBeInTheDocument();
  });
});

describe('aggregate', () => {
  it('handles an empty fleet and missing fields without NaN', () => {
    expect(aggregate([])).toMatchObject({ gpu_count: 0, average_utilization: null, max_temperature: null, total_power_draw: null, total_memory_total: 0 });
    const a = aggregate([{ utilization: 50, temperature: null, power_draw: 100, memory_used: 1, memory_total: 4 }, { lost: true }, null]);
    expect(a).toMatchObject({ gpu_count: 3, reporting_count: 1, lost_count: 2, average_utilization: 50, max_temperature: null, total_power_draw: 100 });
  });

  it("shows a GPU's booking on its card: who, and from when (or until when, while it runs)", async () => {
    fleetOf([gpu('h1', 0), gpu('h1', 1), gpu('h1', 2)]);
    vi.spyOn(endpoints, 'history').mockResolvedValue(history());
    const soon = new Date(Date.now() + 3 * 3_600_000);
    soon.setSeconds(0, 0);
    const later = new Date(soon.getTime() + 86_400_000);
    const running = { start: new Date(Date.now() - 3_600_000).toISOString(), end: soon.toISOString() };
    const row = (id: string, owner: string, w: { start: string; end: string }, gpus: { host: string; index: number }[]) =>
      ({ id, owner, kind: 'booking', ...w, gpus, gpu_count: gpus.length, state: 'upcoming' }) as never;
    const list = vi.spyOn(endpoints, 'bookings').mockResolvedValue({ count: 3, data: [
      row('b0', 'erik', running, [{ host: 'h1', index: 1 }]),
      row('b1', 'dana', { start: soon.toISOString(), end: later.toISOString() }, [{ host: 'h1', index: 0 }, { host: 'h1', index: 1 }]),
      row('b2', 'zoe', { start: later.toISOString(), end: new Date(later.getTime() + 3_600_000).toISOString() }, [{ host: 'h1', index: 0 }]),
    ] });
    renderPage();
    const card0 = screen.getByTestId('gpu-card-h1-0');
    const hh = `${String(soon.getHours()).padStart(2, '0')}:${String(soon.getMinutes()).padStart(2, '0')}`;
    await waitFor(() => expect(within(card0).getByTestId('gpu-next-booking')).toHaveTextContent(`Next booking: dana from`));
    expect(within(card0).getByTestId('gpu-next-booking')).toHaveTextContent(hh); // the first by start, not zoe's
    expect(within(screen.getByTestId('gpu-card-h1-1')).getByTestId('gpu-next-booking')).toHaveTextContent(`Booked: erik until`);
    expect(within(screen.getByTestId('gpu-card-h1-2')).queryByTestId('gpu-next-booking')).toBeNull();
    expect(list).toHaveBeenCalledTimes(1);
  });
});
