import { describe, expect, it } from 'vitest';
import { mergeEvents, mergeMetrics, MAX_METRICS } from './useTraining';
import { stragglers } from './TrainingCharts';
import { defaults, recipeSpec, toConfig } from './recipes';
import { appendLog, MAX_LOG_CHARS } from './TrainingLog';
import { event, metric } from '../../test/factories';

describe('toConfig', () => {
  it('turns the defaults into a typed config, leaving empty optional fields to the server', () => {
    const spec = recipeSpec('mlp');
    const { config, errors } = toConfig(spec, defaults(spec));
    expect(errors).toEqual({});
    expect(config).toMatchObject({ in_features: 16, hidden: [64, 64], task: 'regression', lr: 0.001, max_steps: 200 });
    expect('micro_batch_size' in config).toBe(false);
    expect('data_path' in config).toBe(false);
  });

  it('names every field that is not usable', () => {
    const spec = recipeSpec('sae');
    const { errors } = toConfig(spec, { ...defaults(spec), max_steps: '1.5', lr: '0', d_in: '', precision: 'fp64' });
    expect(errors).toEqual({ max_steps: 'a whole number', lr: 'must be greater than 0', d_in: 'required', precision: 'one of fp32, bf16, fp16' });
  });
});

describe('bounded training state', () => {
  it('keeps metric steps increasing and the list bounded', () => {
    let m = mergeMetrics([], [metric(1, 1), metric(2, 0.9)]);
    m = mergeMetrics(m, [metric(2, 0.9), metric(3, 0.8)]);
    expect(m.map((x) => x.step)).toEqual([1, 2, 3]);
    let big = m;
    for (let s = 4; s < 20_000; s += 100) big = mergeMetrics(big, Array.from({ length: 100 }, (_, i) => metric(s + i, 1)));
    expect(big.length).toBeLessThanOrEqual(MAX_METRICS);
    expect(big[big.length - 1].step).toBe(20_003);
  });

  it('merges events by sequence number without duplicates', () => {
    expect(mergeEvents([event(1), event(2)], [event(2), event(3)]).map((x) => x.seq)).toEqual([1, 2, 3]);
  });

  it('cuts the log at a line break when it grows too long', () => {
    const line = 'x'.repeat(99) + '\n';
    let log = '';
    for (let i = 0; i < 3000; i++) log = appendLog(log, line);
    expect(log.length).toBeLessThanOrEqual(MAX_LOG_CHARS);
    expect(log.startsWith('x')).toBe(true);
  });

  it('flags ranks well above the median step time', () => {
    expect([...stragglers([0.1, 0.1, 0.11, 0.3])]).toEqual([3]);
    expect(stragglers([0.1]).size).toBe(0);
  });
});

describe('robustTop', () => {
  it('caps the chart when warm-up steps dwarf the rest, and not otherwise', async () => {
    const { robustTop } = await import('./TrainingCharts');
    const steady = Array.from({ length: 40 }, () => 0.01);
    expect(robustTop([0.8, ...steady])).toBeCloseTo(0.015);
    expect(robustTop(steady)).toBeUndefined();
    expect(robustTop([0.8, 0.01])).toBeUndefined();
  });
});
