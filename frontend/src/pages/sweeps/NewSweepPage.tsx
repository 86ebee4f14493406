import { useMemo, useState, type FormEvent } from 'react';
import { useNavigate } from 'react-router-dom';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import { useRecipes } from '../trainings/useRecipes';
import { EMPTY_PARAM, sweepBody, sweepYaml, type ParamRow, type SweepValues } from './sweepFile';

const START: SweepValues = {
  name: '',
  recipe: '',
  config: 'max_steps: 200\nglobal_batch_size: 64',
  params: [{ ...EMPTY_PARAM, name: 'lr', kind: 'range', low: '0.0003', high: '0.03', log: true }],
  method: 'grid',
  trials: '',
  metric: 'loss',
  direction: 'minimize',
  parallel: '4',
  asha: false,
  minSteps: '20',
  reduction: '3',
};

function ParamEditor({ row, fields, method, onChange, onRemove }: {
  row: ParamRow; fields: string[]; method: SweepValues['method']; onChange: (r: ParamRow) => void; onRemove: () => void;
}) {
  const set = <K extends keyof ParamRow>(k: K, v: ParamRow[K]) => onChange({ ...row, [k]: v });
  return (
    <div className="param-row" data-testid="sweep-param">
      <input aria-label="parameter field" list="recipe-fields" value={row.name} placeholder="field, e.g. lr" size={12}
        onChange={(e) => set('name', e.target.value)} />
      <datalist id="recipe-fields">
        {fields.map((f) => (
          <option key={f} value={f} />
        ))}
      </datalist>
      <select aria-label="parameter kind" value={row.kind} onChange={(e) => set('kind', e.target.value as ParamRow['kind'])}>
        <option value="list">values</option>
        <option value="range">range</option>
      </select>
      {row.kind === 'list' ? (
        <input aria-label="parameter values" value={row.values} placeholder="0.001, 0.01  or  [[16], [64, 64]]" size={28}
          onChange={(e) => set('values', e.target.value)} />
      ) : (
        <>
          <input aria-label="parameter low" value={row.low} placeholder="low" size={7} onChange={(e) => set('low', e.target.value)} />
          <input aria-label="parameter high" value={row.high} placeholder="high" size={7} onChange={(e) => set('high', e.target.value)} />
          <label>
            <input type="checkbox" checked={row.log} onChange={(e) => set('log', e.target.checked)} /> log scale
          </label>
          {method === 'grid' && (
            <label>
              points <input aria-label="parameter points" value={row.count} size={3} onChange={(e) => set('count', e.target.value)} />
            </label>
          )}
        </>
      )}
      <button type="button" className="btn-small" aria-label={`remove parameter ${row.name}`} onClick={onRemove}>
        Remove
      </button>
    </div>
  );
}

/** Start a sweep of a recipe from the browser; the form writes the same sweep file `gpufleet sweep start` reads. */
export function NewSweepPage() {
  const navigate = useNavigate();
  const recipes = useRecipes();
  const [v, setV] = useState<SweepValues>(START);
  const [submitError, setSubmitError] = useState<string | null>(null);
  const [submitting, setSubmitting] = useState(false);
  const recipe = v.recipe || recipes.data?.data[0]?.name || '';
  const values = { ...v, recipe };
  const fields = (recipes.data?.data.find((r) => r.name === recipe)?.fields ?? []).map((f) => f.name);
  const built = useMemo(() => sweepBody(values), [JSON.stringify(values)]);
  const set = <K extends keyof SweepValues>(k: K, x: SweepValues[K]) => setV((old) => ({ ...old, [k]: x }));
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (!built.body || submitting) return;
    setSubmitting(true);
    setSubmitError(null);
    try {
      const s = await endpoints.createSweep(built.body);
      navigate(`/sweeps/${s.id}`);
    } catch (err) {
      setSubmitError(err instanceof ApiError ? err.message : String(err));
    } finally {
      setSubmitting(false);
    }
  };
  return (
    <div className="page">
      <div className="page-head">
        <h2>New sweep</h2>
      </div>
      <p className="field-help">
        Tries many configurations of one recipe; each trial is a training of yours in the same queue. A sweep of your own script
        needs its code packed: start it with <code>gpufleet sweep start FILE</code> (docs: Sweeps).
      </p>
      <form onSubmit={submit} noValidate aria-label="New sweep">
        <div className="panel">
          <div className="form-grid">
            <div className="field">
              <label htmlFor="sw-name">Name</label>
              <input id="sw-name" value={v.name} placeholder="e.g. mlp-lr-width" onChange={(e) => set('name', e.target.value)} />
            </div>
            <div className="field">
              <label htmlFor="sw-recipe">Recipe</label>
              <select id="sw-recipe" value={recipe} onChange={(e) => set('recipe', e.target.value)}>
                {(recipes.data?.data ?? []).map((r) => (
                  <option key={r.name} value={r.name}>
                    {r.name}
                  </option>
                ))}
              </select>
            </div>
            <div className="field">
              <label htmlFor="sw-config">Base config</label>
              <textarea id="sw-config" rows={3} value={v.config} onChange={(e) => set('config', e.target.value)} />
              <span className="field-help">field: value per line; every trial starts from it</span>
            </div>
          </div>
        </div>
        <div className="panel">
          <h3>Search space</h3>
          {v.params.map((p, i) => (
            <ParamEditor key={i} row={p} fields={fields} method={v.method}
              onChange={(r) => set('params', v.params.map((x, j) => (j === i ? r : x)))}
              onRemove={() => set('params', v.params.filter((_, j) => j !== i))} />
          ))}
          <button type="button" className="btn-small" onClick={() => set('params', [...v.params, { ...EMPTY_PARAM }])}>
            Add parameter
          </button>
        </div>
        <div className="panel">
          <div className="form-grid">
            <div className="field">
              <label htmlFor="sw-method">Method</label>
              <select id="sw-method" value={v.method} onChange={(e) => set('method', e.target.value as SweepValues['method'])}>
                <option value="grid">grid: every point</option>
                <option value="random">random</option>
                <option value="tpe">TPE (learns from earlier trials)</option>
              </select>
            </div>
            <div className="field">
              <label htmlFor="sw-trials">Trials</label>
              <input id="sw-trials" value={v.trials} inputMode="numeric" placeholder={v.method === 'grid' ? 'every point' : 'e.g. 20'}
                onChange={(e) => set('trials', e.target.value)} />
            </div>
            <div className="field">
              <label htmlFor="sw-metric">Metric</label>
              <input id="sw-metric" value={v.metric} onChange={(e) => set('metric', e.target.value)} />
              <select aria-label="direction" value={v.direction} onChange={(e) => set('direction', e.target.value as SweepValues['direction'])}>
                <option value="minimize">minimize</option>
                <option value="maximize">maximize</option>
              </select>
            </div>
            <div className="field">
              <label htmlFor="sw-parallel">At once</label>
              <input id="sw-parallel" value={v.parallel} inputMode="numeric" onChange={(e) => set('parallel', e.target.value)} />
              <span className="field-help">trials queued or running together</span>
            </div>
            <fieldset className="field">
              <legend>Early stopping</legend>
              <label>
                <input type="checkbox" checked={v.asha} onChange={(e) => set('asha', e.target.checked)} /> stop weak trials early (ASHA)
              </label>
              {v.asha && (
                <span className="inline-form">
                  <label>
                    first rung at <input aria-label="first rung steps" value={v.minSteps} size={5} onChange={(e) => set('minSteps', e.target.value)} /> steps
                  </label>
                  <label>
                    keep 1 in <input aria-label="reduction factor" value={v.reduction} size={2} onChange={(e) => set('reduction', e.target.value)} />
                  </label>
                </span>
              )}
            </fieldset>
          </div>
        </div>
        <div className="panel">
          <h3>Sweep file</h3>
          {built.body ? (
            <pre className="code-block" data-testid="sweep-yaml">{sweepYaml(built.body)}</pre>
          ) : (
            <p className="field-error" role="alert" data-testid="sweep-form-problem">
              {built.error}
            </p>
          )}
          <span className="field-help">the same file starts this sweep from a shell: gpufleet sweep start FILE</span>
        </div>
        {submitError && (
          <div className="banner banner-error" role="alert">
            {submitError}
          </div>
        )}
        <div className="actions">
          <button type="submit" className="primary" disabled={!built.body || submitting}>
            {submitting ? 'Starting…' : 'Start sweep'}
          </button>
        </div>
      </form>
    </div>
  );
}
