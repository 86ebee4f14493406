import { describe, expect, it } from 'vitest';
import { Ring } from './ring';

describe('Ring', () => {
  it('keeps only the newest points, oldest first', () => {
    const r = new Ring(3);
    for (let i = 1; i <= 5; i++) r.push(i, i * 10);
    expect(r.length).toBe(3);
    expect(r.columns()).toEqual([
      [3, 4, 5],
      [30, 40, 50],
    ]);
    expect(r.last()).toBe(50);
  });

  it('stays bounded over a day of 1 Hz samples', () => {
    const r = new Ring(300);
    for (let t = 0; t < 86_400; t++) r.push(t, t % 100);
    expect(r.length).toBe(300);
    expect(r.columns()[0][0]).toBe(86_100);
  });

  it('ignores replayed older points and keeps gaps as null', () => {
    const r = new Ring(5);
    r.push(10, 1);
    r.push(11, null);
    r.push(10, 99);
    expect(r.columns()).toEqual([
      [10, 11],
      [1, null],
    ]);
  });

  it('refuses a bad capacity', () => {
    expect(() => new Ring(0)).toThrow(/positive/);
  });
});

describe('Ring.backfill', () => {
  it('merges older stored points under the live ones, still bounded', () => {
    const r = new Ring(4);
    r.push(10, 1);
    r.push(11, 2);
    r.backfill([
      [7, 7],
      [8, 8],
      [9, 9],
      [10, 99],
    ]);
    // The live value wins for x=10; the oldest point falls off.
    expect(r.columns()).toEqual([
      [8, 9, 10, 11],
      [8, 9, 1, 2],
    ]);
    r.push(12, 3);
    expect(r.columns()[0]).toEqual([9, 10, 11, 12]);
  });
});
