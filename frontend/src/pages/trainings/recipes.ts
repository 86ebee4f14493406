/**
 * The config fields the create form shows per recipe. The server validates
 * every field again with the recipe's dataclass (and names the field when it
 * refuses); these descriptions only decide what the form offers and check the
 * obvious (a number where a number goes) before a round trip.
 */

export type FieldKind = 'int' | 'float' | 'choice' | 'text' | 'int-list';

export interface FieldSpec {
  name: string;
  label: string;
  kind: FieldKind;
  default: string;
  choices?: string[];
  min?: number;
  help?: string;
  optional?: boolean;
}

export interface RecipeSpec {
  name: string;
  description: string;
  fields: FieldSpec[];
}

const COMMON: FieldSpec[] = [
  { name: 'max_steps', label: 'Steps', kind: 'int', default: '200', min: 1 },
  { name: 'global_batch_size', label: 'Global batch size', kind: 'int', default: '256', min: 1, help: 'split across the ranks' },
  { name: 'micro_batch_size', label: 'Micro-batch per rank', kind: 'int', default: '', min: 1, optional: true, help: 'empty: global ÷ ranks' },
  { name: 'lr', label: 'Learning rate', kind: 'float', default: '0.001', min: 0 },
  { name: 'precision', label: 'Precision', kind: 'choice', default: 'fp32', choices: ['fp32', 'bf16', 'fp16'] },
  { name: 'strategy', label: 'Strategy', kind: 'choice', default: 'auto', choices: ['auto', 'ddp', 'fsdp'] },
  { name: 'checkpoint_every', label: 'Checkpoint every (steps)', kind: 'int', default: '100', min: 1 },
  { name: 'log_every', label: 'Log every (steps)', kind: 'int', default: '10', min: 1 },
  { name: 'seed', label: 'Seed', kind: 'int', default: '0', min: 0 },
  { name: 'data_path', label: 'Data file', kind: 'text', default: '', optional: true, help: 'under the data root; empty: synthetic data' },
];

export const RECIPES: RecipeSpec[] = [
  {
    name: 'sae',
    description: 'Sparse autoencoder (TopK or ReLU + L1) on activation vectors',
    fields: [
      { name: 'd_in', label: 'Input width (d_in)', kind: 'int', default: '64', min: 1 },
      { name: 'n_latents', label: 'Latents', kind: 'int', default: '512', min: 1 },
      { name: 'variant', label: 'Variant', kind: 'choice', default: 'topk', choices: ['topk', 'relu'] },
      { name: 'k', label: 'k (TopK)', kind: 'int', default: '8', min: 1 },
      { name: 'l1_coeff', label: 'L1 weight (ReLU)', kind: 'float', default: '0.3', min: 0 },
      ...COMMON,
    ],
  },
  {
    name: 'mlp',
    description: 'Multilayer perceptron for regression or classification on tabular arrays',
    fields: [
      { name: 'in_features', label: 'Input features', kind: 'int', default: '16', min: 1 },
      { name: 'out_features', label: 'Outputs', kind: 'int', default: '1', min: 1 },
      { name: 'hidden', label: 'Hidden layers', kind: 'int-list', default: '64, 64', help: 'widths, comma-separated' },
      { name: 'task', label: 'Task', kind: 'choice', default: 'regression', choices: ['regression', 'classification'] },
      { name: 'activation', label: 'Activation', kind: 'choice', default: 'relu', choices: ['relu', 'gelu', 'tanh'] },
      ...COMMON,
    ],
  },
];

export function recipeSpec(name: string): RecipeSpec {
  return RECIPES.find((r) => r.name === name) ?? RECIPES[0];
}

export function defaults(spec: RecipeSpec): Record<string, string> {
  return Object.fromEntries(spec.fields.map((f) => [f.name, f.default]));
}

/**
 * Form strings to a config object, and the fields that cannot be one.
 * Empty optional fields are left out so the server's default applies.
 */
export function toConfig(spec: RecipeSpec, values: Record<string, string>): { config: Record<string, unknown>; errors: Record<string, string> } {
  const config: Record<string, unknown> = {};
  const errors: Record<string, string> = {};
  for (const f of spec.fields) {
    const raw = (values[f.name] ?? '').trim();
    if (raw === '') {
      if (!f.optional) errors[f.name] = 'required';
      continue;
    }
    if (f.kind === 'int' || f.kind === 'float') {
      const n = Number(raw);
      if (!Number.isFinite(n) || (f.kind === 'int' && !Number.isInteger(n))) {
        errors[f.name] = f.kind === 'int' ? 'a whole number' : 'a number';
        continue;
      }
      if (f.min !== undefined && (n < f.min || (f.min === 0 && f.name === 'lr' && n === 0))) {
        errors[f.name] = f.name === 'lr' ? 'must be greater than 0' : `at least ${f.min}`;
        continue;
      }
      config[f.name] = n;
    } else if (f.kind === 'int-list') {
      const parts = raw.split(/[,\s]+/).filter(Boolean).map(Number);
      if (parts.some((n) => !Number.isInteger(n) || n < 1)) {
        errors[f.name] = 'positive whole numbers, comma-separated';
        continue;
      }
      config[f.name] = parts;
    } else if (f.kind === 'choice') {
      if (f.choices && !f.choices.includes(raw)) {
        errors[f.name] = `one of ${f.choices.join(', ')}`;
        continue;
      }
      config[f.name] = raw;
    } else {
      config[f.name] = raw;
    }
  }
  return { config, errors };
}
