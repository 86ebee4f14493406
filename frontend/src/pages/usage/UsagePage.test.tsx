import { render, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { MemoryRouter } from 'react-router-dom';
import { describe, expect, it, vi } from 'vitest';
import { endpoints } from '../../api/endpoints';
import type { Usage, UsageRow } from '../../api/types';
import { rangeOf } from './usage';
import { UsagePage } from './UsagePage';

function row(day: string, name: string, held: number, pool = 0, booked = 0, bookedUsed = 0): UsageRow {
  return { day, name, gpu_hours_held: held, gpu_hours_used: held / 4, gpu_seconds_held: held * 3600, gpu_seconds_used: held * 900, trainings: 2,
           gpu_hours_pool: pool, gpu_seconds_pool: pool * 3600, gpu_hours_booked: booked, gpu_seconds_booked: booked * 3600,
           gpu_hours_booked_used: bookedUsed, gpu_seconds_booked_used: bookedUsed * 3600 };
}

function answer(by: 'user' | 'group', data: UsageRow[]): Usage {
  const { from, to } = rangeOf(7);
  return { by, from, to, data, count: data.length };
}

describe('UsagePage', () => {
  it('draws a stacked bar per day and lists the rows; by group asks again', async () => {
    const { from, to } = rangeOf(7);
    const usage = vi.spyOn(endpoints, 'usage').mockResolvedValue(answer('user', [row(from, 'alice', 3), row(to, 'alice', 1), row(to, 'bob', 2)]));
    render(
      <MemoryRouter initialEntries={['/usage']}>
        <UsagePage />
      </MemoryRouter>,
    );
    const table = await screen.findByTestId('usage-table');
    expect(usage.mock.calls[0][0]).toEqual({ by: 'user', from, to });
    expect(within(table).getAllByRole('row')).toHaveLength(1 + 3 + 1);
    expect(within(table).getByText('6.00 GPU-hours')).toBeInTheDocument();
    const chart = screen.getByTestId('usage-chart');
    const today = chart.querySelector(`[data-day="${to}"]`)!;
    expect([...today.querySelectorAll('rect')].map((r) => r.getAttribute('data-name'))).toEqual(['alice', 'bob']);
    expect(chart.querySelectorAll('g[data-day]')).toHaveLength(7);

    usage.mockResolvedValue(answer('group', [row(to, 'vision', 3)]));
    await userEvent.click(screen.getByRole('button', { name: 'By group' }));
    await waitFor(() => expect(usage.mock.lastCall![0]).toMatchObject({ by: 'group' }));
    await waitFor(() => expect(within(screen.getByTestId('usage-table')).getByText('vision')).toBeInTheDocument());
    expect(screen.queryByText('Of held, on pools')).not.toBeInTheDocument(); // no pool use: no column
    expect(screen.queryByText('Booked')).not.toBeInTheDocument(); // no bookings: no columns
  });

  it('shows the part held on Slurm pools when there is some', async () => {
    const { to } = rangeOf(7);
    vi.spyOn(endpoints, 'usage').mockResolvedValue(answer('user', [row(to, 'alice', 3, 2), row(to, 'bob', 1)]));
    render(
      <MemoryRouter initialEntries={['/usage']}>
        <UsagePage />
      </MemoryRouter>,
    );
    const table = await screen.findByTestId('usage-table');
    expect(within(table).getByText('Of held, on pools')).toBeInTheDocument();
    const alice = table.querySelector('tr[data-name="alice"]')!;
    expect([...alice.querySelectorAll('td')].map((td) => td.textContent)).toEqual([to, 'alice', '3.00', '0.75', '2', '2.00']);
  });

  it('lists what the checkpoint store holds per user, and says why when the store did not answer', async () => {
    const { to } = rangeOf(7);
    vi.spyOn(endpoints, 'usage').mockResolvedValue({
      ...answer('user', [row(to, 'alice', 3)]), store: 's3://ckpts/team',
      stored: [{ name: 'alice', bytes: 3 * 1024 ** 3 }, { name: 'bob', bytes: 700 }],
    });
    const { unmount } = render(
      <MemoryRouter initialEntries={['/usage']}>
        <UsagePage />
      </MemoryRouter>,
    );
    const stored = await screen.findByTestId('stored-table');
    expect(screen.getByText('s3://ckpts/team')).toBeInTheDocument();
    const cells = (name: string) => [...stored.querySelector(`tr[data-name="${name}"]`)!.querySelectorAll('td')].map((td) => td.textContent);
    expect(cells('alice')).toEqual(['alice', '3.0 GiB']);
    expect(cells('bob')).toEqual(['bob', '700 B']);
    unmount();

    vi.spyOn(endpoints, 'usage').mockResolvedValue({
      ...answer('user', [row(to, 'alice', 3)]), store: 's3://ckpts/team', stored: null,
      stored_error: 'the checkpoint store s3://ckpts/team did not answer a listing (timeout)',
    });
    render(
      <MemoryRouter initialEntries={['/usage']}>
        <UsagePage />
      </MemoryRouter>,
    );
    expect(await screen.findByRole('alert')).toHaveTextContent('did not answer a listing');
    expect(screen.queryByTestId('stored-table')).not.toBeInTheDocument();
    expect(screen.getByTestId('usage-table')).toBeInTheDocument(); // GPU time is still shown
  });

  it('shows no store section when the server has no store', async () => {
    const { to } = rangeOf(7);
    vi.spyOn(endpoints, 'usage').mockResolvedValue(answer('user', [row(to, 'alice', 3)]));
    render(
      <MemoryRouter initialEntries={['/usage']}>
        <UsagePage />
      </MemoryRouter>,
    );
    await screen.findByTestId('usage-table');
    expect(screen.queryByText('Checkpoints stored')).not.toBeInTheDocument();
  });

  it('shows booked hours and the part used when there are bookings', async () => {
    const { to } = rangeOf(7);
    vi.spyOn(endpoints, 'usage').mockResolvedValue(answer('user', [row(to, 'alice', 3, 0, 8, 2.5), row(to, 'bob', 1)]));
    render(
      <MemoryRouter initialEntries={['/usage']}>
        <UsagePage />
      </MemoryRouter>,
    );
    const table = await screen.findByTestId('usage-table');
    expect(within(table).getByText('Booked')).toBeInTheDocument();
    const cells = (name: string) => [...table.querySelector(`tr[data-name="${name}"]`)!.querySelectorAll('td')].map((td) => td.textContent);
    expect(cells('alice')).toEqual([to, 'alice', '3.00', '0.75', '2', '8.00', '2.50']);
    expect(cells('bob')).toEqual([to, 'bob', '1.00', '0.25', '2', '0', '0']);
  });

  it('says so when nobody held a GPU', async () => {
    vi.spyOn(endpoints, 'usage').mockResolvedValue(answer('user', []));
    render(
      <MemoryRouter initialEntries={['/usage?days=30']}>
        <UsagePage />
      </MemoryRouter>,
    );
    expect(await screen.findByText('No GPU was held in this range.')).toBeInTheDocument();
  });
});
