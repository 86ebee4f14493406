/**
 * The sweep form's values as the sweep file a person would write (docs/sweeps.md):
 * the same body goes to POST /api/v1/sweeps, and the same text to
 * `gpufleet sweep start FILE`, so what the form starts can be kept and rerun.
 */
import type { SweepCreate } from '../../api/types';

export type ParamKind = 'list' | 'range';

export interface ParamRow {
  name: string;
  kind: ParamKind;
  /** list: values separated by commas, or a JSON array (`[[16], [64, 64]]`). */
  values: string;
  low: string;
  high: string;
  log: boolean;
  /** grid over a range: this many points. */
  count: string;
}

export interface SweepValues {
  name: string;
  recipe: string;
  /** `field: value` per line: the config every trial starts from. */
  config: string;
  params: ParamRow[];
  method: 'grid' | 'random' | 'tpe';
  trials: string;
  metric: string;
  direction: 'minimize' | 'maximize';
  parallel: string;
  asha: boolean;
  minSteps: string;
  reduction: string;
}

export const EMPTY_PARAM: ParamRow = { name: '', kind: 'list', values: '', low: '', high: '', log: false, count: '4' };

/** A value as a person types it: a number, true/false, JSON (lists), else text. */
export function parseValue(text: string): unknown {
  const t = text.trim();
  if (t === '') return '';
  if (/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t)) return Number(t);
  if (t === 'true' || t === 'false') return t === 'true';
  if (t.startsWith('[') || t.startsWith('{') || t.startsWith('"')) {
    try {
      return JSON.parse(t);
    } catch {
      return t;
    }
  }
  return t;
}

function parseList(text: string): unknown[] {
  const t = text.trim();
  if (t.startsWith('[')) {
    const v = parseValue(t);
    if (Array.isArray(v)) return v;
  }
  return t.split(',').map((x) => x.trim()).filter(Boolean).map(parseValue);
}

function parseConfig(text: string): { config: Record<string, unknown>; error?: string } {
  const config: Record<string, unknown> = {};
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const at = line.indexOf(':');
    if (at <= 0) return { config, error: `base config line ${i + 1}: write it as field: value` };
    config[line.slice(0, at).trim()] = parseValue(line.slice(at + 1));
  }
  return { config };
}

function int(text: string): number | undefined {
  const t = text.trim();
  return t === '' ? undefined : Number(t);
}

/** The request body, or the first thing to fix (in the form's words). */
export function sweepBody(v: SweepValues): { body?: SweepCreate; error?: string } {
  if (!v.name.trim()) return { error: 'give the sweep a name' };
  if (!v.recipe) return { error: 'pick a recipe' };
  const { config, error } = parseConfig(v.config);
  if (error) return { error };
  const space: Record<string, unknown> = {};
  for (const p of v.params) {
    if (!p.name.trim()) return { error: 'every parameter needs a field name' };
    if (p.kind === 'list') {
      const values = parseList(p.values);
      if (values.length === 0) return { error: `${p.name}: give at least one value` };
      space[p.name.trim()] = values;
    } else {
      const low = parseValue(p.low);
      const high = parseValue(p.high);
      if (typeof low !== 'number' || typeof high !== 'number') return { error: `${p.name}: low and high must be numbers` };
      const range: Record<string, unknown> = { low, high };
      if (p.log) range.log = true;
      if (v.method === 'grid') range.count = int(p.count);
      space[p.name.trim()] = range;
    }
  }
  if (Object.keys(space).length === 0) return { error: 'add at least one parameter to search' };
  const body: Record<string, unknown> = {
    name: v.name.trim(),
    recipe: v.recipe,
    config,
    space,
    method: v.method,
    metric: v.metric.trim() || 'loss',
    direction: v.direction,
    parallel: int(v.parallel) ?? 4,
  };
  const trials = int(v.trials);
  if (trials !== undefined) body.trials = trials;
  if (v.asha) body.asha = { min_steps: int(v.minSteps), reduction_factor: int(v.reduction) ?? 3 };
  return { body: body as unknown as SweepCreate };
}

/** YAML's flow style for one value (JSON is valid YAML flow; keys of mappings stay bare). */
function flow(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(flow).join(', ')}]`;
  if (v && typeof v === 'object') return `{${Object.entries(v).map(([k, x]) => `${k}: ${flow(x)}`).join(', ')}}`;
  if (typeof v === 'string') return /^[A-Za-z_][\w.\-/]*$/.test(v) && !['true', 'false', 'null', 'yes', 'no', 'on', 'off'].includes(v) ? v : JSON.stringify(v);
  return String(v);
}

/** The sweep file for `body`, in the order docs/sweeps.md writes it. */
export function sweepYaml(body: SweepCreate): string {
  const b = body as unknown as Record<string, unknown>;
  const lines: string[] = [];
  for (const key of ['name', 'recipe', 'config']) if (b[key] !== undefined) lines.push(`${key}: ${flow(b[key])}`);
  lines.push('space:');
  for (const [k, x] of Object.entries(b.space as Record<string, unknown>)) lines.push(`  ${k}: ${flow(x)}`);
  for (const key of ['method', 'trials', 'asha', 'metric', 'direction', 'parallel']) if (b[key] !== undefined) lines.push(`${key}: ${flow(b[key])}`);
  return lines.join('\n') + '\n';
}
