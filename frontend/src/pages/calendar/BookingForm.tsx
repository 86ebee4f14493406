import { useState, type FormEvent } from 'react';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import type { BookingConflict, BookingWindow } from '../../api/types';
import { fmtWindow, hoursBetween, toLocalInput, viewerZone } from './calendar';

function nextHour(now = new Date()): Date {
  return new Date(now.getFullYear(), now.getMonth(), now.getDate(), now.getHours() + 1);
}

function Window({ w }: { w: Pick<BookingWindow, 'start' | 'end'> }) {
  return <>{fmtWindow(new Date(w.start), new Date(w.end))}</>;
}

/** The 409's story: whose booking is in the way, and the next window the same ask fits, to take with a click. */
function ConflictNote({ conflict, onUse }: { conflict: BookingConflict; onUse: (w: BookingWindow) => void }) {
  const way = conflict.in_the_way;
  const free = conflict.next_free;
  return (
    <div className="banner banner-error" role="alert" data-testid="booking-conflict">
      <div>
        Those GPUs are booked then
        {way && (
          <>
            {' '}by <strong data-testid="in-the-way-owner">{way.owner}</strong>
            {way.kind === 'maintenance' ? ' (maintenance)' : ''}: <span data-testid="in-the-way-window"><Window w={way} /></span>
          </>
        )}
        .
      </div>
      {free ? (
        <div>
          Next free: <span data-testid="next-free-window"><Window w={free} /></span>{' '}
          <button type="button" className="btn-small" onClick={() => onUse(free)}>
            Use this window
          </button>
        </div>
      ) : (
        <div>No free window for this ask within the booking horizon.</div>
      )}
    </div>
  );
}

/** The form's state, and its two asks: the next free window, and the booking itself. */
function useBookingForm(onBooked: () => void) {
  const [gpus, setGpus] = useState(1);
  const [host, setHost] = useState('');
  const [start, setStart] = useState(() => toLocalInput(nextHour()));
  const [hours, setHours] = useState(2);
  const [reason, setReason] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [conflict, setConflict] = useState<BookingConflict | null>(null);
  const [found, setFound] = useState<string | null>(null);
  const [booked, setBooked] = useState<string | null>(null);

  const use = (w: BookingWindow) => {
    setStart(toLocalInput(new Date(w.start)));
    setHours(hoursBetween(new Date(w.start), new Date(w.end)));
    setConflict(null);
  };

  const find = async () => {
    setError(null);
    setFound(null);
    try {
      const answer = await endpoints.freeWindow({ gpus, hours, host: host || undefined });
      if (answer.window) {
        use(answer.window);
        setFound(`Free: ${fmtWindow(new Date(answer.window.start), new Date(answer.window.end))}`);
      } else setFound('No free window for this ask within the booking horizon.');
    } catch (e) {
      setError(e instanceof ApiError ? e.message : String(e));
    }
  };

  const submit = async (ev: FormEvent) => {
    ev.preventDefault();
    setBusy(true);
    setError(null);
    setConflict(null);
    setBooked(null);
    try {
      const b = await endpoints.createBooking({ gpus, host: host || null, start, hours, time_zone: viewerZone(), reason: reason || null });
      setBooked(`Booked ${b.gpu_count} GPU${b.gpu_count === 1 ? '' : 's'} on ${b.gpus[0]?.host ?? '?'}: ${fmtWindow(new Date(b.start), new Date(b.end))}`);
      onBooked();
    } catch (e) {
      if (e instanceof ApiError && e.status === 409 && e.body && typeof e.body === 'object') setConflict(e.body as BookingConflict);
      else setError(e instanceof ApiError ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };

  return { gpus, setGpus, host, setHost, start, setStart, hours, setHours, reason, setReason, busy, error, conflict, found, booked,
           use, find, submit };
}

/**
 * Book GPUs from the page. Times are typed in the viewer's zone, which is sent with them (`time_zone`), so the
 * server reads them as the viewer meant. "Find" asks for the next free window for the GPUs and hours and fills
 * the start with it.
 */
export function BookingForm({ hosts, onBooked }: { hosts: string[]; onBooked: () => void }) {
  const { gpus, setGpus, host, setHost, start, setStart, hours, setHours, reason, setReason, busy, error, conflict, found, booked,
          use, find, submit } = useBookingForm(onBooked);
  return (
    <form className="panel" aria-label="Book GPUs" onSubmit={submit}>
      <h3>Book GPUs</h3>
      <div className="form-grid">
        <div className="field">
          <label htmlFor="book-gpus">GPUs</label>
          <input id="book-gpus" type="number" min={1} value={gpus} onChange={(e) => setGpus(Number(e.target.value))} />
        </div>
        <div className="field">
          <label htmlFor="book-host">Host</label>
          <select id="book-host" value={host} onChange={(e) => setHost(e.target.value)}>
            <option value="">Any host</option>
            {hosts.map((h) => (
              <option key={h} value={h}>
                {h}
              </option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="book-start">Start</label>
          <input id="book-start" type="datetime-local" step={60} value={start} onChange={(e) => setStart(e.target.value)} />
          <span className="field-help">in your zone, {viewerZone()}</span>
        </div>
        <div className="field">
          <label htmlFor="book-hours">Hours</label>
          <input id="book-hours" type="number" min={0.5} step={0.5} value={hours} onChange={(e) => setHours(Number(e.target.value))} />
        </div>
        <div className="field">
          <label htmlFor="book-reason">Reason</label>
          <input id="book-reason" value={reason} maxLength={500} onChange={(e) => setReason(e.target.value)} />
        </div>
      </div>
      <div className="actions" style={{ marginTop: '0.8rem', display: 'flex', gap: '0.6rem', alignItems: 'center' }}>
        <button type="submit" className="primary" disabled={busy}>
          Book
        </button>
        <button type="button" onClick={find}>
          Find next free window
        </button>
        {found && <span className="muted" data-testid="found-window">{found}</span>}
        {booked && <span role="status" data-testid="booked">{booked}</span>}
      </div>
      {error && (
        <div className="field-error" role="alert">
          {error}
        </div>
      )}
      {conflict && <ConflictNote conflict={conflict} onUse={use} />}
    </form>
  );
}
