import '@testing-library/jest-dom/vitest';
import { cleanup } from '@testing-library/react';
import { afterEach, vi } from 'vitest';
import { setLiveClient } from '../api/live';

// jsdom has no canvas: uPlot is replaced by a recorder of what it was given,
// so tests can check the data a chart receives.
vi.mock('uplot', () => {
  class FakePlot {
    static instances: FakePlot[] = [];
    data: unknown;
    opts: unknown;
    constructor(opts: unknown, data: unknown) {
      this.opts = opts;
      this.data = data;
      FakePlot.instances.push(this);
    }
    setData(d: unknown) {
      this.data = d;
    }
    setSize() {}
    destroy() {}
  }
  return { default: FakePlot };
});

afterEach(() => {
  cleanup();
  setLiveClient(null);
  vi.restoreAllMocks();
});
