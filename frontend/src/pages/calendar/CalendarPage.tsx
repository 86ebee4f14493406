import { useMemo, useState } from 'react';
import { endpoints } from '../../api/endpoints';
import type { Booking, GPU } from '../../api/types';
import { useAction } from '../../api/useAction';
import { useQuery } from '../../api/useQuery';
import { ErrorState, Loading } from '../../components/States';
import { useFleet } from '../fleet/useFleet';
import { BookingForm } from './BookingForm';
import { fmtDay, fmtWindow, markOf, place, viewerZone, weekDays, weekEnd, weekStart, type Mark } from './calendar';

const MARK_TEXT: Record<Mark, string> = { mine: 'yours', other: "another's", maintenance: 'maintenance' };

function held(b: Booking, g: GPU): boolean {
  return b.gpus.some((x) => x.host === g.host && x.index === g.index);
}

function Bar({ b, mark, from, to }: { b: Booking; mark: Mark; from: Date; to: Date }) {
  const start = new Date(b.start);
  const end = new Date(b.end);
  const at = place(start, end, from, to);
  if (!at) return null;
  const label = `${b.owner} (${MARK_TEXT[mark]}): ${fmtWindow(start, end)}${b.reason ? ` — ${b.reason}` : ''}`;
  return (
    <div
      className={`cal-bar cal-${mark}`}
      data-testid="booking-bar"
      data-mark={mark}
      data-owner={b.owner}
      data-booking={b.id}
      style={{ left: `${at.left}%`, width: `${at.width}%` }}
      title={label}
      aria-label={label}
    >
      {b.kind === 'maintenance' ? 'maintenance' : b.owner}
    </div>
  );
}

/** One row per GPU, grouped by host; the week's days as columns; bookings as bars across them. */
function WeekGrid({ byHost, bookings, me, from }: { byHost: [string, GPU[]][]; bookings: Booking[]; me?: string; from: Date }) {
  const to = weekEnd(from);
  const days = weekDays(from);
  const now = place(new Date(), new Date(Date.now() + 60_000), from, to);
  return (
    <div className="cal" data-testid="calendar-grid" role="table" aria-label="Bookings this week">
      <div className="cal-row cal-head" role="row">
        <div className="cal-label" role="columnheader">GPU</div>
        <div className="cal-days">
          {days.map((d) => (
            <div key={d.toISOString()} className="cal-day" role="columnheader">
              {fmtDay(d)}
            </div>
          ))}
        </div>
      </div>
      {byHost.map(([host, gpus]) => (
        <section key={host} aria-label={`Host ${host}`} className="cal-host">
          <div className="cal-host-title">{host}</div>
          {gpus.map((g) => (
            <div key={g.id} className="cal-row" role="row" data-testid={`cal-gpu-${g.host}-${g.index}`}>
              <div className="cal-label" role="rowheader">
                GPU {g.index} <span className="muted">{g.name.replace(/^NVIDIA /, '')}</span>
              </div>
              <div className="cal-track">
                {now && <div className="cal-now" style={{ left: `${now.left}%` }} aria-hidden />}
                {bookings.filter((b) => held(b, g)).map((b) => (
                  <Bar key={b.id} b={b} mark={markOf(b, me)} from={from} to={to} />
                ))}
              </div>
            </div>
          ))}
        </section>
      ))}
    </div>
  );
}

function BookingList({ bookings, me, onChanged }: { bookings: Booking[]; me?: string; onChanged: () => void }) {
  const act = useAction(onChanged);
  if (bookings.length === 0) return <p className="muted">No bookings this week.</p>;
  return (
    <>
      {act.error && <div className="banner banner-error">{act.error}</div>}
      <table className="table" data-testid="booking-list">
        <thead>
          <tr>
            <th>Who</th>
            <th>GPUs</th>
            <th>When ({viewerZone()})</th>
            <th>State</th>
            <th>Reason</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {bookings.map((b) => {
            const mark = markOf(b, me);
            return (
              <tr key={b.id} data-booking={b.id} data-mark={mark}>
                <td>
                  <span className={`cal-swatch cal-${mark}`} aria-hidden /> {b.owner}
                  {mark === 'mine' && <span className="muted"> (you)</span>}
                </td>
                <td>
                  {b.gpus[0]?.host} · {b.gpus.map((g) => g.index).join(',')}
                </td>
                <td>{fmtWindow(new Date(b.start), new Date(b.end))}</td>
                <td>{b.state}</td>
                <td>{b.reason ?? ''}</td>
                <td>
                  {mark === 'mine' && (b.state === 'upcoming' || b.state === 'active') && (
                    <button type="button" className="btn-small danger" disabled={act.busy}
                            onClick={() => act.run(() => endpoints.cancelBooking(b.id))}>
                      Cancel
                    </button>
                  )}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </>
  );
}

/** A secret address for a calendar app; asking again rotates it (the old address stops working). */
function FeedLink() {
  const [url, setUrl] = useState<string | null>(null);
  const act = useAction(() => undefined);
  const ask = () => act.run(async () => setUrl((await endpoints.createBookingFeed()).url));
  return (
    <div className="panel" data-testid="feed" style={{ marginTop: '1rem' }}>
      <h3>Calendar app</h3>
      <p className="field-help">
        Subscribe to your bookings from a calendar app. The address is a secret: it reads this feed only and signs in
        nowhere. A new address ends the old one.
      </p>
      <button type="button" onClick={ask} disabled={act.busy}>
        {url ? 'New feed address' : 'Get feed address'}
      </button>
      {url && <input readOnly aria-label="Feed address" value={url} style={{ width: '100%', marginTop: '0.5rem' }} />}
      {act.error && <div className="field-error" role="alert">{act.error}</div>}
    </div>
  );
}

/** Who holds which GPU when, a week at a time, in the viewer's zone; book from here, cancel one's own. */
export function CalendarPage() {
  const [offset, setOffset] = useState(0);
  const from = useMemo(() => weekStart(new Date(), offset), [offset]);
  const to = weekEnd(from);
  const fleet = useFleet(60_000);
  const me = useQuery('whoami', (signal) => endpoints.whoami(signal));
  const q = useQuery(`bookings|${from.toISOString()}`, (signal) =>
    endpoints.bookings({ since: from.toISOString(), until: to.toISOString(), tz: viewerZone() }, signal), 30_000);
  const bookings = q.data?.data ?? [];
  const name = me.data?.name;

  return (
    <div className="page">
      <div className="page-head">
        <h2>Calendar</h2>
        <span className="muted" data-testid="calendar-range">
          {fmtDay(from)} – {fmtDay(new Date(to.getTime() - 1))} · {viewerZone()}
        </span>
        <div className="actions toggle" role="group" aria-label="Week">
          <button type="button" onClick={() => setOffset((o) => o - 1)}>← Previous week</button>
          <button type="button" onClick={() => setOffset(0)} disabled={offset === 0}>This week</button>
          <button type="button" onClick={() => setOffset((o) => o + 1)}>Next week →</button>
        </div>
      </div>
      <div className="cal-legend muted">
        <span><span className="cal-swatch cal-mine" aria-hidden /> yours</span>
        <span><span className="cal-swatch cal-other" aria-hidden /> another's</span>
        <span><span className="cal-swatch cal-maintenance" aria-hidden /> maintenance</span>
      </div>
      {q.error && !q.data && <ErrorState error={q.error} onRetry={q.reload} />}
      {fleet.error && !fleet.data && <ErrorState error={fleet.error} onRetry={fleet.reload} />}
      {(!q.data || !fleet.data) && !q.error && !fleet.error && <Loading what="bookings" />}
      {q.data && fleet.data && <WeekGrid byHost={fleet.byHost} bookings={bookings} me={name} from={from} />}
      <BookingForm hosts={fleet.byHost.map(([h]) => h)} onBooked={q.reload} />
      <h3>This week's bookings</h3>
      <BookingList bookings={bookings} me={name} onChanged={q.reload} />
      <FeedLink />
    </div>
  );
}
