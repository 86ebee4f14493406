/**
 * The create form's view of a recipe: the fields, kinds, defaults and choices
 * come from the server (`GET /api/v1/recipes`, read from each recipe's config
 * dataclass), so a recipe installed from another package shows up with the
 * server's defaults. What the server does not carry lives here as an overlay:
 * friendly labels, help and lower bounds for field names we know, and which
 * fields the form shows first. A field the overlay does not know still renders
 * from its kind, default and choices. The server validates every field again
 * (and names the field when it refuses); the checks here only catch the
 * obvious (a number where a number goes) before a round trip.
 */
import type { Recipe, RecipeField } from '../../api/types';

export type FieldKind = RecipeField['kind'];

export interface FieldSpec {
  name: string;
  label: string;
  kind: FieldKind;
  /** The server's default as the form's text; '' for none. */
  default: string;
  choices?: string[];
  min?: number;
  help?: string;
  optional?: boolean;
  /** Shown under "More fields" rather than up front. */
  more?: boolean;
}

export interface RecipeSpec {
  name: string;
  description: string;
  fields: FieldSpec[];
}

interface FieldOverlay {
  label: string;
  help?: string;
  min?: number;
}

/** Presentation of the fields every recipe shares, in the order the form shows them. */
const COMMON: Record<string, FieldOverlay> = {
  max_steps: { label: 'Steps', min: 1 },
  global_batch_size: { label: 'Global batch size', min: 1, help: 'split across the ranks' },
  micro_batch_size: { label: 'Micro-batch per rank', min: 1, help: 'empty: global ÷ ranks' },
  lr: { label: 'Learning rate', min: 0 },
  precision: { label: 'Precision' },
  strategy: { label: 'Strategy' },
  checkpoint_every: { label: 'Checkpoint every (steps)', min: 1 },
  log_every: { label: 'Log every (steps)', min: 1 },
  seed: { label: 'Seed', min: 0 },
  data_path: { label: 'Data file', help: 'under the data root; empty: synthetic data' },
};

/** Presentation of the built-in recipes' own fields, shown before the shared ones. */
const KNOWN: Record<string, Record<string, FieldOverlay>> = {
  sae: {
    d_in: { label: 'Input width (d_in)', min: 1 },
    n_latents: { label: 'Latents', min: 1 },
    variant: { label: 'Variant' },
    k: { label: 'k (TopK)', min: 1 },
    l1_coeff: { label: 'L1 weight (ReLU)', min: 0 },
  },
  mlp: {
    in_features: { label: 'Input features', min: 1 },
    out_features: { label: 'Outputs', min: 1 },
    hidden: { label: 'Hidden layers', help: 'widths, comma-separated' },
    task: { label: 'Task' },
    activation: { label: 'Activation' },
  },
};

/** A JSON default as the text of its input. */
function asText(v: RecipeField['default']): string {
  if (v == null) return '';
  if (Array.isArray(v)) return v.join(', ');
  return String(v);
}

function fieldSpec(f: RecipeField, overlay: FieldOverlay | undefined, more: boolean): FieldSpec {
  return {
    name: f.name,
    label: overlay?.label ?? f.name,
    kind: f.kind,
    default: asText(f.default),
    choices: f.kind === 'bool' ? ['true', 'false'] : (f.choices ?? undefined),
    min: overlay?.min,
    help: overlay?.help ?? f.help ?? undefined,
    optional: f.optional || undefined,
    more: more || undefined,
  };
}

/**
 * The server's recipe with the overlay applied. Fields the overlay knows come
 * first (the recipe's own, then the shared ones, in the overlay's order); for a
 * built-in recipe the rest go under "More fields", and for a recipe the
 * overlay does not know, its own fields stay up front.
 */
export function specFor(r: Recipe): RecipeSpec {
  const own = KNOWN[r.name];
  const known = { ...(own ?? {}), ...COMMON };
  const order = Object.keys(known);
  const byName = new Map(r.fields.map((f) => [f.name, f]));
  const first = order.filter((n) => byName.has(n)).map((n) => fieldSpec(byName.get(n)!, known[n], false));
  const unknownFields = r.fields.filter((f) => !(f.name in known));
  const rest = unknownFields.map((f) => fieldSpec(f, undefined, !!own));
  const fields = own ? [...first, ...rest] : [...rest, ...first];
  return { name: r.name, description: r.description, fields };
}

/** Every recipe the server lists, the built-ins first, each with the overlay applied. */
export function recipeSpecs(recipes: Recipe[]): RecipeSpec[] {
  const rank = (name: string) => {
    const i = Object.keys(KNOWN).indexOf(name);
    return i === -1 ? Number.MAX_SAFE_INTEGER : i;
  };
  return recipes
    .map((r, i) => ({ r, i }))
    .sort((a, b) => rank(a.r.name) - rank(b.r.name) || a.i - b.i)
    .map(({ r }) => specFor(r));
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
    } else if (f.kind === 'bool') {
      if (raw !== 'true' && raw !== 'false') {
        errors[f.name] = 'true or false';
        continue;
      }
      config[f.name] = raw === 'true';
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
