import { describe, expect, it } from 'vitest';
import { EMPTY_PARAM, parseValue, sweepBody, sweepYaml, type SweepValues } from './sweepFile';

const base: SweepValues = {
  name: 'mlp-lr-width',
  recipe: 'mlp',
  config: 'max_steps: 80\nglobal_batch_size: 64',
  params: [
    { ...EMPTY_PARAM, name: 'lr', kind: 'range', low: '3e-4', high: '0.03', log: true, count: '4' },
    { ...EMPTY_PARAM, name: 'hidden', kind: 'list', values: '[[16], [64], [64, 64]]' },
  ],
  method: 'grid',
  trials: '',
  metric: 'loss',
  direction: 'minimize',
  parallel: '8',
  asha: true,
  minSteps: '10',
  reduction: '2',
};

describe('the sweep form as a sweep file', () => {
  it('reads values as people write them', () => {
    expect(parseValue('3e-4')).toBe(0.0003);
    expect(parseValue('64')).toBe(64);
    expect(parseValue('true')).toBe(true);
    expect(parseValue('[16, 32]')).toEqual([16, 32]);
    expect(parseValue('adamw')).toBe('adamw');
  });

  it('builds the body POST /sweeps takes, the same as docs/sweeps.md example', () => {
    const { body, error } = sweepBody(base);
    expect(error).toBeUndefined();
    expect(body).toEqual({
      name: 'mlp-lr-width',
      recipe: 'mlp',
      config: { max_steps: 80, global_batch_size: 64 },
      space: { lr: { low: 0.0003, high: 0.03, log: true, count: 4 }, hidden: [[16], [64], [64, 64]] },
      method: 'grid',
      metric: 'loss',
      direction: 'minimize',
      parallel: 8,
      asha: { min_steps: 10, reduction_factor: 2 },
    });
  });

  it('writes the sweep file a shell starts the same sweep from', () => {
    const yaml = sweepYaml(sweepBody(base).body!);
    expect(yaml).toBe(
      'name: mlp-lr-width\nrecipe: mlp\nconfig: {max_steps: 80, global_batch_size: 64}\nspace:\n' +
        '  lr: {low: 0.0003, high: 0.03, log: true, count: 4}\n  hidden: [[16], [64], [64, 64]]\n' +
        'method: grid\nasha: {min_steps: 10, reduction_factor: 2}\nmetric: loss\ndirection: minimize\nparallel: 8\n',
    );
  });

  it('random and TPE ranges carry no grid count; text that YAML would misread is quoted', () => {
    const { body } = sweepBody({ ...base, method: 'tpe', trials: '20', asha: false, config: 'optimizer: "yes"' });
    expect(body).toMatchObject({ method: 'tpe', trials: 20, space: { lr: { low: 0.0003, high: 0.03, log: true } } });
    expect((body as unknown as { space: { lr: object } }).space.lr).not.toHaveProperty('count');
    expect(sweepYaml(body!)).toContain('config: {optimizer: "yes"}');
  });

  it('says what to fix instead of sending a half-written sweep', () => {
    expect(sweepBody({ ...base, name: ' ' }).error).toBe('give the sweep a name');
    expect(sweepBody({ ...base, params: [] }).error).toBe('add at least one parameter to search');
    expect(sweepBody({ ...base, params: [{ ...EMPTY_PARAM, name: 'lr', kind: 'range', low: 'a', high: '1' }] }).error).toBe(
      'lr: low and high must be numbers',
    );
    expect(sweepBody({ ...base, config: 'max_steps 80' }).error).toBe('base config line 1: write it as field: value');
  });
});
