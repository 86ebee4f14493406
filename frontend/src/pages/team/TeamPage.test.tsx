import { render, screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { MemoryRouter } from 'react-router-dom';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import type { TeamUser } from '../../api/types';
import { TeamPage } from './TeamPage';

const user = (over: Partial<TeamUser> = {}): TeamUser => ({
  name: 'alice', role: 'member', disabled: false, run_code: false, non_preemptible: false, unix_account: null,
  live_tokens: 1, groups: ['vision'], created_at: '2026-11-01T10:00:00Z', ...over,
});

function stubTeam(role: 'admin' | 'member') {
  vi.spyOn(endpoints, 'whoami').mockResolvedValue({ name: role === 'admin' ? 'root' : 'alice', role, via: 'token', auth_required: true } as never);
  vi.spyOn(endpoints, 'users').mockResolvedValue({ data: [user(), user({ name: 'root', role: 'admin', groups: [] })], count: 2 } as never);
  vi.spyOn(endpoints, 'quotas').mockResolvedValue({ data: [{ user: 'alice', max_gpus: 2, gpu_hours_per_week: null, share: 1, max_priority: 10, max_priority_set_by: 'root', booking_max_gpus: 3 }], count: 1 } as never);
  vi.spyOn(endpoints, 'tokens').mockResolvedValue({ data: [], count: 0 } as never);
  vi.spyOn(endpoints, 'groups').mockResolvedValue({ data: [{ name: 'vision', members: ['alice'], quota: { max_gpus: 4, gpu_hours_per_week: null, max_priority: null, booking_hours_per_week: 40 } }], count: 1 } as never);
  vi.spyOn(endpoints, 'webhooks').mockResolvedValue({ data: [], count: 0 } as never);
}

const page = () => render(<MemoryRouter><TeamPage /></MemoryRouter>);

afterEach(() => vi.restoreAllMocks());

describe('TeamPage', () => {
  it('lists the team with roles, groups, limits and priority caps for an admin', async () => {
    stubTeam('admin');
    page();
    const row = await screen.findByTestId('user-alice');
    expect(within(row).getByLabelText('role of alice')).toHaveValue('member');
    expect(within(row).getByText('vision')).toBeInTheDocument();
    expect(within(row).getByLabelText('GPU limit of alice')).toHaveValue('2');
    expect(within(row).getByLabelText('priority cap of alice')).toHaveValue('10');
    expect(await screen.findByTestId('group-vision')).toHaveTextContent('alice');
  });

  it('changes a role and a permission through the API, with the admin token entered once as the second step', async () => {
    stubTeam('admin');
    const update = vi.spyOn(endpoints, 'updateUser').mockResolvedValue(user({ role: 'viewer' }) as never);
    page();
    await userEvent.type(await screen.findByLabelText('your API token for changes to users and tokens'), 'gf_admin-token');
    const row = await screen.findByTestId('user-alice');
    await userEvent.selectOptions(within(row).getByLabelText('role of alice'), 'viewer');
    expect(update).toHaveBeenCalledWith('alice', { role: 'viewer' }, 'gf_admin-token');
    await userEvent.click(within(row).getByLabelText('run code'));
    expect(update).toHaveBeenCalledWith('alice', { run_code: true }, 'gf_admin-token');
  });

  it('sets a priority cap and limits; blank is no limit', async () => {
    stubTeam('admin');
    const put = vi.spyOn(endpoints, 'setUserQuota').mockResolvedValue({} as never);
    page();
    const row = await screen.findByTestId('user-alice');
    await userEvent.clear(within(row).getByLabelText('priority cap of alice'));
    await userEvent.type(within(row).getByLabelText('priority cap of alice'), '50');
    await userEvent.clear(within(row).getByLabelText('GPU limit of alice'));
    await userEvent.click(within(row).getByRole('button', { name: 'Save' }));
    expect(put).toHaveBeenCalledWith('alice', {
      max_gpus: null, gpu_hours_per_week: null, max_priority: 50, share: 1,
      booking_max_gpus: 3, booking_hours_per_week: null, booking_max_hours: null, booking_max_ahead_days: null,
    });
  });

  it("sets a user's and a group's booking limits, and a save keeps the ones already set", async () => {
    stubTeam('admin');
    const putUser = vi.spyOn(endpoints, 'setUserQuota').mockResolvedValue({} as never);
    const putGroup = vi.spyOn(endpoints, 'setGroupQuota').mockResolvedValue({} as never);
    page();
    const row = await screen.findByTestId('user-alice');
    await userEvent.type(within(row).getByLabelText('longest booking in hours of alice'), '120');
    await userEvent.click(within(row).getByRole('button', { name: 'Save' }));
    expect(putUser).toHaveBeenCalledWith('alice', expect.objectContaining({ booking_max_gpus: 3, booking_max_hours: 120 }));
    const group = await screen.findByTestId('group-vision');
    expect(within(group).getByLabelText('booked GPU-hours per week of group vision')).toHaveValue('40');
    await userEvent.clear(within(group).getByLabelText('GPU limit of group vision'));
    await userEvent.click(within(group).getByRole('button', { name: 'Save quota' }));
    expect(putGroup).toHaveBeenCalledWith('vision', {
      max_gpus: null, gpu_hours_per_week: null, max_priority: null,
      booking_max_gpus: null, booking_hours_per_week: 40, booking_max_hours: null, booking_max_ahead_days: null,
    });
  });

  it("shows the server's refusal beside the user, in its words", async () => {
    stubTeam('admin');
    vi.spyOn(endpoints, 'updateUser').mockRejectedValue(new ApiError(409, "'root' is the team's last active admin: make another user admin first"));
    page();
    const row = await screen.findByTestId('user-root');
    await userEvent.selectOptions(within(row).getByLabelText('role of root'), 'member');
    expect(await screen.findByRole('alert')).toHaveTextContent('last active admin');
  });

  it('maps a Unix account only with the admin token re-entered, sent with that request alone', async () => {
    stubTeam('admin');
    const map = vi.spyOn(endpoints, 'setUnixAccount').mockResolvedValue({ user: 'alice', unix_account: 'alice2' } as never);
    page();
    const row = await screen.findByTestId('user-alice');
    await userEvent.type(within(row).getByLabelText('Unix account of alice'), 'alice2');
    expect(within(row).getByRole('button', { name: 'Map' })).toBeDisabled();
    await userEvent.type(within(row).getByLabelText('your API token to map alice'), 'gf_admin-token');
    await userEvent.click(within(row).getByRole('button', { name: 'Map' }));
    expect(map).toHaveBeenCalledWith('alice', 'alice2', 'gf_admin-token', false);
  });

  it('shows a new token once, with its secret', async () => {
    stubTeam('admin');
    const create = vi.spyOn(endpoints, 'createToken').mockResolvedValue({
      id: 't1', prefix: 'gf_abcdefg', user: 'alice', name: 'laptop', created_at: '2026-11-27T10:00:00Z', expires_at: null,
      revoked_at: null, last_used_at: null, secret: 'gf_abcdefg-secret',
    } as never);
    page();
    await userEvent.type(await screen.findByLabelText('your API token for changes to users and tokens'), 'gf_admin-token');
    await userEvent.type(await screen.findByLabelText('token user'), 'alice');
    await userEvent.type(screen.getByLabelText('token label'), 'laptop');
    await userEvent.click(screen.getByRole('button', { name: 'Create token' }));
    expect(create).toHaveBeenCalledWith({ user: 'alice', name: 'laptop', expires_days: null }, 'gf_admin-token');
    expect(await screen.findByTestId('token-secret')).toHaveTextContent('gf_abcdefg-secret');
  });

  it('gives a member only their own webhooks and says who manages the team', async () => {
    stubTeam('member');
    page();
    expect(await screen.findByTestId('team-not-admin')).toHaveTextContent('Only admins manage users');
    expect(screen.queryByTestId('users-table')).not.toBeInTheDocument();
    expect(endpoints.users).not.toHaveBeenCalled();
    expect(screen.getByRole('region', { name: 'Your webhooks' })).toBeInTheDocument();
  });
});
