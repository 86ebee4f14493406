import { describe, expect, it } from 'vitest';
import { mergeEvents, mergeMetrics, MAX_METRICS } from './useTraining';
import { stragglers } from './TrainingCharts';
import { defaults, recipeSpecs, specFor, toConfig, type RecipeSpec } from './recipes';
import { appendLog, MAX_LOG_CHARS } from './TrainingLog';
import { event, metric, recipe, recipeField, recipes } from '../../test/factories';

const recipeSpec = (name: string): RecipeSpec => recipeSpecs(recipes().data).find((r) => r.name === name)!;

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

describe('recipe specs from the server', () => {
  it('puts the built-ins first and overlays labels on the fields it knows', () => {
    const specs = recipeSpecs(recipes(recipe('aaa', [])).data);
    expect(specs.map((r) => r.name)).toEqual(['sae', 'mlp', 'aaa']);
    const sae = specs[0];
    expect(sae.description).toBe('the sae recipe');
    expect(sae.fields.slice(0, 5).map((f) => f.label)).toEqual(['Input width (d_in)', 'Latents', 'Variant', 'k (TopK)', 'L1 weight (ReLU)']);
    expect(sae.fields.find((f) => f.name === 'variant')).toMatchObject({ kind: 'choice', default: 'topk', choices: ['relu', 'topk'] });
    // A field the overlay does not know renders from what the server says, under "More fields".
    expect(sae.fields.find((f) => f.name === 'dead_steps')).toEqual({ name: 'dead_steps', label: 'dead_steps', kind: 'int', default: '100', more: true });
    expect(sae.fields.find((f) => f.name === 'max_steps')).toMatchObject({ label: 'Steps', default: '200', min: 1 });
  });

  it('shows every field of a recipe it does not know, its own ones up front', () => {
    const spec = specFor(recipe('toy', [
      recipeField('width', 'int', 3, { help: 'how wide' }),
      recipeField('loud', 'bool', false),
      recipeField('tags', 'int-list', [1, 2]),
      recipeField('shape', 'choice', null, { choices: ['round', 'square'], optional: true }),
    ]));
    expect(spec.fields.every((f) => !f.more)).toBe(true);
    expect(spec.fields.map((f) => f.name).slice(0, 4)).toEqual(['weight_decay', 'grad_clip', 'width', 'loud']);
    expect(spec.fields.find((f) => f.name === 'width')).toMatchObject({ label: 'width', help: 'how wide', default: '3' });
    expect(spec.fields.find((f) => f.name === 'loud')).toMatchObject({ kind: 'bool', default: 'false', choices: ['true', 'false'] });
    const { config, errors } = toConfig(spec, { ...defaults(spec), loud: 'true' });
    expect(errors).toEqual({});
    expect(config).toMatchObject({ width: 3, loud: true, tags: [1, 2], max_steps: 200 });
    expect('shape' in config).toBe(false);
    expect(toConfig(spec, { ...defaults(spec), loud: 'maybe' }).errors).toEqual({ loud: 'true or false' });
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
