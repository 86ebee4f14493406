/**
 * The calendar's arithmetic, all in the viewer's own zone (the browser's): a week starts at local midnight,
 * a booking is placed on a GPU's row by its share of the week, and times are written as the viewer reads them.
 */
import type { Booking } from '../../api/types';

export const DAY_MS = 86_400_000;
export const WEEK_DAYS = 7;

/** The viewer's IANA zone, which the page sends with the times typed in its form. */
export function viewerZone(): string {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
}

/** Local midnight of the day `t` falls on, `offsetWeeks` weeks later. */
export function weekStart(t: Date, offsetWeeks = 0): Date {
  return new Date(t.getFullYear(), t.getMonth(), t.getDate() + offsetWeeks * WEEK_DAYS);
}

/** The week's days as local midnights (a day across a daylight-saving change is 23 or 25 hours). */
export function weekDays(start: Date): Date[] {
  return Array.from({ length: WEEK_DAYS }, (_, i) => new Date(start.getFullYear(), start.getMonth(), start.getDate() + i));
}

export function weekEnd(start: Date): Date {
  return new Date(start.getFullYear(), start.getMonth(), start.getDate() + WEEK_DAYS);
}

/** Where a window lies on the week's row, in percent of the week; null when it misses the week. */
export function place(start: Date, end: Date, from: Date, to: Date): { left: number; width: number } | null {
  const a = Math.max(start.getTime(), from.getTime());
  const b = Math.min(end.getTime(), to.getTime());
  if (b <= a) return null;
  const span = to.getTime() - from.getTime();
  return { left: ((a - from.getTime()) / span) * 100, width: ((b - a) / span) * 100 };
}

export type Mark = 'mine' | 'other' | 'maintenance';

export function markOf(b: Pick<Booking, 'kind' | 'owner'>, me: string | undefined): Mark {
  if (b.kind === 'maintenance') return 'maintenance';
  return me !== undefined && b.owner === me ? 'mine' : 'other';
}

const pad = (n: number) => String(n).padStart(2, '0');

/** A `datetime-local` input's value for `t` in the viewer's zone: 2026-12-04T14:00. */
export function toLocalInput(t: Date): string {
  return `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())}T${pad(t.getHours())}:${pad(t.getMinutes())}`;
}

export function fmtDay(t: Date): string {
  return t.toLocaleDateString(undefined, { weekday: 'short', day: 'numeric', month: 'short' });
}

export function fmtTime(t: Date): string {
  return `${pad(t.getHours())}:${pad(t.getMinutes())}`;
}

/** "Thu 4 Dec 14:00–20:00", or with the end's day when it ends on another. */
export function fmtWindow(start: Date, end: Date): string {
  const sameDay = start.toDateString() === end.toDateString();
  return `${fmtDay(start)} ${fmtTime(start)}–${sameDay ? '' : `${fmtDay(end)} `}${fmtTime(end)}`;
}

/** Hours between two instants, to one decimal. */
export function hoursBetween(start: Date, end: Date): number {
  return Math.round(((end.getTime() - start.getTime()) / 3_600_000) * 10) / 10;
}
