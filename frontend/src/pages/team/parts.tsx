/** The Team page's shared pieces: a section's frame, a refusal shown beside its control, a limit field's value,
 * and a quota's booking limits. */
import { useState, type ReactNode } from 'react';

export function Section({ title, help, children }: { title: string; help: ReactNode; children: ReactNode }) {
  return (
    <section className="panel team-section" aria-label={title}>
      <h3>{title}</h3>
      <p className="field-help">{help}</p>
      {children}
    </section>
  );
}

export function Refusal({ error }: { error: string | null }) {
  return error ? (
    <div className="banner banner-error" role="alert">
      {error}
    </div>
  ) : null;
}

/** Blank is "no limit" (null); anything else must be a number. */
export function limitValue(text: string): number | null {
  return text.trim() === '' ? null : Number(text);
}

/** A quota's booking limits (GET/PUT of a user's or a group's quota). */
export interface BookingLimits {
  booking_max_gpus?: number | null;
  booking_hours_per_week?: number | null;
  booking_max_hours?: number | null;
  booking_max_ahead_days?: number | null;
}

type BookingKey = keyof BookingLimits;
const BOOKING_FIELDS: [BookingKey, string, string][] = [
  ['booking_max_gpus', 'booked GPUs at once', 'GPUs'],
  ['booking_hours_per_week', 'booked GPU-hours per week', 'GPU-h'],
  ['booking_max_hours', 'longest booking in hours', 'max h'],
  ['booking_max_ahead_days', 'days ahead a booking may start', 'days'],
];

/** The booking limits' fields as typed, and their values to send (a quota's PUT replaces it: sent every time). */
export function useBookingLimits(q: BookingLimits | undefined) {
  const [text, setText] = useState<Record<BookingKey, string>>(
    () => Object.fromEntries(BOOKING_FIELDS.map(([k]) => [k, q?.[k] == null ? '' : String(q[k])])) as Record<BookingKey, string>,
  );
  const values = (): Required<BookingLimits> =>
    Object.fromEntries(BOOKING_FIELDS.map(([k]) => [k, limitValue(text[k])])) as Required<BookingLimits>;
  return { text, set: (k: BookingKey, v: string) => setText((t) => ({ ...t, [k]: v })), values };
}

/** Four small fields for what bookings may hold; blank is ``blank`` (a user: the server's default; a group: none). */
export function BookingLimitInputs({ of, limits, blank }: { of: string; limits: ReturnType<typeof useBookingLimits>; blank: string }) {
  return (
    <span className="booking-limits" title={`what bookings may hold; blank: ${blank}`}>
      <span className="muted">bookings</span>
      {BOOKING_FIELDS.map(([k, label, short]) => (
        <input key={k} aria-label={`${label} of ${of}`} value={limits.text[k]} placeholder={short}
          inputMode="decimal" title={`${label}; blank: ${blank}`} onChange={(e) => limits.set(k, e.target.value)} />
      ))}
    </span>
  );
}
