import '@testing-library/jest-dom/vitest';
import { cleanup, configure } from '@testing-library/react';
import { afterEach, vi } from 'vitest';
import { setLiveClient } from '../api/live';

// waitFor and findBy wait for what the page shows, never for a time. The dashboard's tests run beside
// the Python test shards at a lower priority (scripts/test.sh), where an answer can take seconds, not
// testing-library's default of one.
configure({ asyncUtilTimeout: 15_000 });

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
