import { describe, expect, it } from 'vitest';
import { appendLog, collapseRedraws } from './TrainingLog';

describe('a progress bar in the log', () => {
  it('shows only its newest redraw per rank, across the pieces a followed log arrives in', () => {
    let text = appendLog('', '[rank 0] start\n[rank 0] 10%\r\n[rank 1] 5%\r\n');
    text = appendLog(text, '[rank 0] 20%\r\n');
    expect(text).toBe('[rank 0] start\n[rank 1] 5%\r\n[rank 0] 20%\r\n');
    text = appendLog(text, '[rank 1] loss 0.5\n');
    expect(text).toBe('[rank 0] start\n[rank 0] 20%\r\n[rank 1] loss 0.5\n');
  });

  it('leaves a log without redraws as it is', () => {
    expect(collapseRedraws('[rank 0] a\n[rank 1] b\n')).toBe('[rank 0] a\n[rank 1] b\n');
  });
});
