import { describe, expect, it } from 'vitest';
import type { UsageRow } from '../../api/types';
import { niceTop } from './UsageChart';
import { daysBetween, rangeOf, toGrid } from './usage';

function row(day: string, name: string, held: number, used = held / 2): UsageRow {
  return { day, name, gpu_hours_held: held, gpu_hours_used: used, gpu_seconds_held: held * 3600, gpu_seconds_used: used * 3600, trainings: 1,
           gpu_hours_pool: 0, gpu_seconds_pool: 0, gpu_hours_booked: 0, gpu_seconds_booked: 0, gpu_hours_booked_used: 0,
           gpu_seconds_booked_used: 0 };
}

describe('usage grid', () => {
  it('fills every day of the range and stacks names largest first', () => {
    const rows = [row('2026-11-20', 'alice', 2), row('2026-11-22', 'alice', 1), row('2026-11-22', 'bob', 5)];
    const g = toGrid(rows, '2026-11-20', '2026-11-22', 'held');
    expect(g.days).toEqual(['2026-11-20', '2026-11-21', '2026-11-22']);
    expect(g.names).toEqual(['bob', 'alice']);
    expect(g.hours.alice).toEqual([2, 0, 1]);
    expect(g.totals).toEqual([2, 0, 6]);
    expect(toGrid(rows, '2026-11-20', '2026-11-22', 'used').totals).toEqual([1, 0, 3]);
  });

  it('ranges end today in UTC and cross month ends', () => {
    expect(rangeOf(7, new Date('2026-03-02T23:30:00Z'))).toEqual({ from: '2026-02-24', to: '2026-03-02' });
    expect(daysBetween('2026-02-27', '2026-03-01')).toEqual(['2026-02-27', '2026-02-28', '2026-03-01']);
  });
});

describe('usage chart axis', () => {
  it('tops at a round number', () => {
    expect([niceTop(8), niceTop(8.8), niceTop(0.03), niceTop(0), niceTop(120)]).toEqual([10, 10, 0.05, 1, 200]);
  });
});
