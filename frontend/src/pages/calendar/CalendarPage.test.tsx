import { render, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { MemoryRouter } from 'react-router-dom';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import type { Booking } from '../../api/types';
import { gpu } from '../../test/factories';
import { toLocalInput, weekEnd, weekStart } from './calendar';
import { CalendarPage } from './CalendarPage';

// Tomorrow at a local hour: always inside "this week" (the week starts at today's local midnight).
function tomorrowAt(hour: number): Date {
  const d = weekStart(new Date());
  return new Date(d.getFullYear(), d.getMonth(), d.getDate() + 1, hour);
}

function booking(id: string, owner: string, start: Date, hours: number, over: Partial<Booking> = {}): Booking {
  const end = new Date(start.getTime() + hours * 3_600_000);
  return {
    id, owner, kind: 'booking', start: start.toISOString(), end: end.toISOString(), start_local: '', end_local: '',
    shown_in: 'UTC', gpu_count: 1, gpus: [{ host: 'gpu-01', index: 0 }], model: null, reason: null, time_zone: 'UTC',
    created_by: owner, created_at: start.toISOString(), state: 'upcoming', released_at: null, release_reason: null, ...over,
  };
}

function renderPage() {
  return render(
    <MemoryRouter initialEntries={['/calendar']}>
      <CalendarPage />
    </MemoryRouter>,
  );
}

describe('CalendarPage', () => {
  beforeEach(() => {
    vi.spyOn(endpoints, 'gpus').mockResolvedValue({ data: [gpu('gpu-01', 0), gpu('gpu-01', 1), gpu('gpu-02', 0)], count: 3, simulated: true } as never);
    vi.spyOn(endpoints, 'whoami').mockResolvedValue({ name: 'dana', role: 'member', via: 'token', auth_required: true });
  });

  it("draws a row per GPU by host and marks one's own bookings apart from others' and maintenance", async () => {
    const mine = booking('b1', 'dana', tomorrowAt(9), 6);
    const theirs = booking('b2', 'erik', tomorrowAt(16), 2, { gpus: [{ host: 'gpu-01', index: 1 }] });
    const maint = booking('b3', 'root', tomorrowAt(8), 3, { kind: 'maintenance', gpus: [{ host: 'gpu-02', index: 0 }] });
    const list = vi.spyOn(endpoints, 'bookings').mockResolvedValue({ data: [maint, mine, theirs], count: 3 });
    renderPage();
    const grid = await screen.findByTestId('calendar-grid');
    expect(within(grid).getByRole('region', { name: 'Host gpu-01' })).toBeInTheDocument();
    expect(within(grid).getByRole('region', { name: 'Host gpu-02' })).toBeInTheDocument();
    const row0 = screen.getByTestId('cal-gpu-gpu-01-0');
    const bar = within(row0).getByTestId('booking-bar');
    expect(bar.dataset.mark).toBe('mine');
    expect(bar).toHaveClass('cal-mine');
    // Tomorrow 09:00 local is day 1 of 7, plus 9/24 of a day: shown in the viewer's own zone.
    const from = weekStart(new Date()).getTime();
    const span = weekEnd(weekStart(new Date())).getTime() - from;
    expect(parseFloat(bar.style.left)).toBeCloseTo(((tomorrowAt(9).getTime() - from) / span) * 100, 3);
    expect(parseFloat(bar.style.width)).toBeCloseTo(((6 * 3_600_000) / span) * 100, 3);
    expect(bar.getAttribute('aria-label')).toMatch(/dana \(yours\): .* 09:00–15:00/);
    expect(within(screen.getByTestId('cal-gpu-gpu-01-1')).getByTestId('booking-bar').dataset.mark).toBe('other');
    expect(within(screen.getByTestId('cal-gpu-gpu-02-0')).getByTestId('booking-bar').dataset.mark).toBe('maintenance');
    const q = list.mock.calls[0][0];
    expect(new Date(q.since).getTime()).toBe(weekStart(new Date()).getTime());
    expect(q.tz).toBe(Intl.DateTimeFormat().resolvedOptions().timeZone);
    // Only one's own booking can be cancelled, and cancelling asks the server and reloads.
    const table = screen.getByTestId('booking-list');
    expect(within(table).getAllByRole('button', { name: 'Cancel' })).toHaveLength(1);
    const cancel = vi.spyOn(endpoints, 'cancelBooking').mockResolvedValue({ ...mine, state: 'released' });
    list.mockResolvedValue({ data: [maint, theirs], count: 2 });
    await userEvent.click(within(table).getByRole('button', { name: 'Cancel' }));
    expect(cancel).toHaveBeenCalledWith('b1');
    await waitFor(() => expect(within(screen.getByTestId('cal-gpu-gpu-01-0')).queryByTestId('booking-bar')).toBeNull());
  });

  it('books in the viewer zone; a 409 names the booking in the way and offers the next free window', async () => {
    vi.spyOn(endpoints, 'bookings').mockResolvedValue({ data: [], count: 0 });
    const start = tomorrowAt(10);
    const freeStart = tomorrowAt(14);
    const create = vi.spyOn(endpoints, 'createBooking').mockImplementationOnce(async () => {
      const err = new ApiError(409, 'GPUs booked');
      err.body = {
        detail: 'GPUs booked',
        in_the_way: { id: 'b9', owner: 'erik', kind: 'booking', start: tomorrowAt(9).toISOString(), end: tomorrowAt(14).toISOString() },
        next_free: { start: freeStart.toISOString(), end: tomorrowAt(17).toISOString() },
      };
      throw err;
    });
    renderPage();
    await screen.findByTestId('calendar-grid');
    await userEvent.clear(screen.getByLabelText('GPUs'));
    await userEvent.type(screen.getByLabelText('GPUs'), '2');
    await userEvent.selectOptions(screen.getByLabelText('Host'), 'gpu-01');
    await userEvent.clear(screen.getByLabelText('Hours'));
    await userEvent.type(screen.getByLabelText('Hours'), '3');
    // datetime-local inputs take their value whole.
    const startInput = screen.getByLabelText('Start') as HTMLInputElement;
    await userEvent.clear(startInput);
    await userEvent.type(startInput, toLocalInput(start));
    await userEvent.click(screen.getByRole('button', { name: 'Book' }));
    const note = await screen.findByTestId('booking-conflict');
    expect(create.mock.calls[0][0]).toEqual({ gpus: 2, host: 'gpu-01', start: toLocalInput(start), hours: 3,
      time_zone: Intl.DateTimeFormat().resolvedOptions().timeZone, reason: null });
    expect(within(note).getByTestId('in-the-way-owner')).toHaveTextContent('erik');
    expect(within(note).getByTestId('in-the-way-window')).toHaveTextContent(/09:00–14:00/);
    expect(within(note).getByTestId('next-free-window')).toHaveTextContent(/14:00–17:00/);
    await userEvent.click(within(note).getByRole('button', { name: 'Use this window' }));
    expect(startInput.value).toBe(toLocalInput(freeStart));
    create.mockResolvedValueOnce(booking('b10', 'dana', freeStart, 3));
    await userEvent.click(screen.getByRole('button', { name: 'Book' }));
    expect(await screen.findByTestId('booked')).toHaveTextContent(/Booked 1 GPU on gpu-01: .*14:00–17:00/);
    expect(create.mock.calls[1][0]).toMatchObject({ start: toLocalInput(freeStart), hours: 3 });
  });

  it('the finder fills the form with the next free window for N GPUs for H hours', async () => {
    vi.spyOn(endpoints, 'bookings').mockResolvedValue({ data: [], count: 0 });
    const free = vi.spyOn(endpoints, 'freeWindow').mockResolvedValue({ window: { start: tomorrowAt(20).toISOString(), end: tomorrowAt(22).toISOString() } });
    renderPage();
    await screen.findByTestId('calendar-grid');
    await userEvent.clear(screen.getByLabelText('GPUs'));
    await userEvent.type(screen.getByLabelText('GPUs'), '4');
    await userEvent.click(screen.getByRole('button', { name: 'Find next free window' }));
    expect(await screen.findByTestId('found-window')).toHaveTextContent(/20:00–22:00/);
    expect(free).toHaveBeenCalledWith({ gpus: 4, hours: 2, host: undefined });
    expect((screen.getByLabelText('Start') as HTMLInputElement).value).toBe(toLocalInput(tomorrowAt(20)));
  });

  it('gives a calendar-app feed address, and a new one on asking again', async () => {
    vi.spyOn(endpoints, 'bookings').mockResolvedValue({ data: [], count: 0 });
    const feed = vi.spyOn(endpoints, 'createBookingFeed')
      .mockResolvedValueOnce({ url: 'http://x/api/v1/bookings.ics?feed=gfcal_one', token: 'gfcal_one', group: null })
      .mockResolvedValueOnce({ url: 'http://x/api/v1/bookings.ics?feed=gfcal_two', token: 'gfcal_two', group: null });
    renderPage();
    await userEvent.click(await screen.findByRole('button', { name: 'Get feed address' }));
    expect(await screen.findByLabelText('Feed address')).toHaveValue('http://x/api/v1/bookings.ics?feed=gfcal_one');
    await userEvent.click(screen.getByRole('button', { name: 'New feed address' }));
    await waitFor(() => expect(screen.getByLabelText('Feed address')).toHaveValue('http://x/api/v1/bookings.ics?feed=gfcal_two'));
    expect(feed).toHaveBeenCalledTimes(2);
  });
});
