import { useEffect, useMemo, useState, type FormEvent } from 'react';
import { useNavigate } from 'react-router-dom';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import { useQuery } from '../../api/useQuery';
import type { FitBody, TrainingCreate } from '../../api/types';
import { fmtBytes } from '../../lib/format';
import { useFleet } from '../fleet/useFleet';
import { GpuSelector, type Selection } from './GpuSelector';
import { defaults, toConfig, type FieldSpec } from './recipes';
import { useRecipes } from './useRecipes';
import { useSelectionAdvice, type Advice } from './useSelectionAdvice';

function ConfigField({ f, value, error, onChange }: { f: FieldSpec; value: string; error?: string; onChange: (v: string) => void }) {
  const id = `cfg-${f.name}`;
  return (
    <div className="field">
      <label htmlFor={id}>{f.label}</label>
      {f.choices ? (
        <select id={id} name={f.name} value={value} onChange={(e) => onChange(e.target.value)} aria-invalid={!!error}>
          {(f.optional || !f.choices.includes(value)) && <option value="">{f.optional ? 'default' : ''}</option>}
          {f.choices.map((c) => (
            <option key={c}>{c}</option>
          ))}
        </select>
      ) : (
        <input
          id={id}
          name={f.name}
          value={value}
          inputMode={f.kind === 'int' || f.kind === 'float' ? 'decimal' : undefined}
          placeholder={f.optional ? 'default' : undefined}
          onChange={(e) => onChange(e.target.value)}
          aria-invalid={!!error}
          aria-describedby={error ? `${id}-err` : undefined}
        />
      )}
      {error ? (
        <span id={`${id}-err`} className="field-error">
          {error}
        </span>
      ) : (
        f.help && <span className="field-help">{f.help}</span>
      )}
    </div>
  );
}

/** The memory line: the server's estimate, or why there is none (yet). */
function estimateText(advice: Advice, ok: boolean): string {
  if (!ok) return 'fix the config first';
  if (advice.estimateNote) return advice.estimateNote;
  if (advice.needBytes != null) return fmtBytes(advice.needBytes);
  if (advice.refused) return 'none: the server refuses this request (see below)';
  if (advice.adviceError) return `not available: ${advice.adviceError}`;
  return 'estimating…';
}

/** The memory line while the server traces the config: how long it has been, so a busy server's wait reads as
 * one rather than as a page that hangs (a trace takes a few seconds, more on a loaded machine). */
export function EstimateLine({ text }: { text: string }) {
  const waiting = text === 'estimating…';
  const [since, setSince] = useState(() => Date.now());
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    if (!waiting) return;
    const began = Date.now();
    setSince(began);
    setNow(began);
    const tick = window.setInterval(() => setNow(Date.now()), 1000);
    return () => window.clearInterval(tick);
  }, [waiting]);
  const s = Math.floor((now - since) / 1000);
  if (!waiting || s < 3) return <>{text}</>;
  return <>{`estimating… ${s} s (the server traces this config once; a busy server takes longer)`}</>;
}

const stamp = () => new Date().toISOString().slice(5, 16).replace('T', '-').replace(':', '');

export function CreateTrainingPage() {
  const navigate = useNavigate();
  const fleet = useFleet(5000);
  const recipes = useRecipes();
  const [recipe, setRecipe] = useState<string | null>(null);
  const spec = recipes.specs.find((r) => r.name === recipe) ?? null;
  const [values, setValues] = useState<Record<string, string>>({});
  const [name, setName] = useState('');
  const [count, setCount] = useState(1);
  const [selection, setSelection] = useState<Selection>({ host: null, indexes: [] });
  const [touched, setTouched] = useState(false);
  const [serverErrors, setServerErrors] = useState<Record<string, string>>({});
  const [submitError, setSubmitError] = useState<string | null>(null);
  const [submitting, setSubmitting] = useState(false);
  const [fit, setFit] = useState<{ text: string; failed: boolean } | null>(null);
  const [fitting, setFitting] = useState(false);
  // Where it runs: the team's hosts (''), a Slurm pool by name, or the team's hosts and that pool when none of
  // them can ever hold it ('or:NAME', the request's or_pool).
  const [pool, setPool] = useState('');
  const pools = useQuery('pools', (signal) => endpoints.pools(signal), 60_000).data?.data ?? [];
  const onPool = pools.find((p) => p.name === pool) ?? null;
  const orPool = pools.find((p) => `or:${p.name}` === pool) ?? null;

  const { config, errors } = useMemo(() => (spec ? toConfig(spec, values) : { config: {}, errors: {} }), [spec, values]);
  const ok = spec !== null && Object.keys(errors).length === 0;
  const advice = useSelectionAdvice(recipe ?? '', ok ? config : null, count, selection);
  // The team's refusal stops the form only where there is no pool to go to.
  const blocked = !!advice.refused && !onPool && !orPool;
  const top = advice.candidates[0] ?? null;

  // Preselect the recommended set until the person picks GPUs themselves.
  useEffect(() => {
    if (!touched && top) setSelection({ host: top.host, indexes: [...top.gpu_indexes] });
  }, [touched, top]);

  /** `first`: the server's recipes just arrived; a name typed meanwhile stays. */
  const changeRecipe = (r: string, first = false) => {
    const next = recipes.specs.find((x) => x.name === r);
    if (!next) return;
    setRecipe(r);
    setValues(defaults(next));
    setName((old) => (first && old.trim() ? old : `${r}-${stamp()}`));
    setServerErrors({});
  };
  // The first recipe the server lists, once it has answered.
  const firstRecipe = recipes.specs[0]?.name ?? null;
  useEffect(() => {
    if (recipe === null && firstRecipe !== null) changeRecipe(firstRecipe, true);
  }, [recipe, firstRecipe]);
  const setField = (k: string, v: string) => {
    setValues((old) => ({ ...old, [k]: v }));
    setServerErrors(({ [k]: _drop, ...rest }) => rest);
  };

  /** Ask the server what fits this config (the global batch kept) and fill in its pick: the layout
   * fields, the GPU count, and the recommended set for them. */
  const fitToFleet = async () => {
    if (!ok || recipe === null) return;
    setFitting(true);
    setFit(null);
    try {
      const { micro_batch_size: _m, grad_accum_steps: _a, strategy: _s, ...rest } = config;
      const answer = await endpoints.fit({ recipe: recipe as FitBody['recipe'], config: rest, ...(onPool ? { pool: onPool.name } : {}) });
      const pick = answer.pick;
      if (pick) {
        setValues((old) => ({ ...old, ...Object.fromEntries(Object.entries(pick.config).map(([k, v]) => [k, String(v)])) }));
        setCount(pick.world_size);
        setTouched(false);
      }
      setFit({ text: answer.why, failed: !pick });
    } catch (err) {
      setFit({ text: `could not fit: ${(err as ApiError).message}`, failed: true });
    } finally {
      setFitting(false);
    }
  };

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (!ok || blocked || submitting || recipe === null) return;
    setSubmitting(true);
    setSubmitError(null);
    try {
      // The schema lists the recipes installed when it was generated; the page offers what the server has now.
      const common = { name: name.trim(), recipe: recipe as TrainingCreate['recipe'], config };
      const t = await endpoints.createTraining(onPool
        // The pool's scheduler picks the nodes and GPUs: only how many.
        ? { ...common, pool: onPool.name, world_size: count, distributed: count > 1 }
        : {
            ...common,
            // With or_pool the server chooses: the team's hosts, or the pool when they can never hold it.
            ...(orPool ? { or_pool: orPool.name, world_size: count, distributed: count > 1 } : {
              gpu_ids: selection.indexes.length ? selection.indexes : null,
              host: selection.host,
              distributed: selection.indexes.length > 1,
            }),
          });
      navigate(`/trainings/${t.id}`);
    } catch (err) {
      const ae = err as ApiError;
      const fields: Record<string, string> = {};
      for (const [k, v] of Object.entries(ae.fields ?? {})) fields[k.replace(/^config\./, '')] = v;
      setServerErrors(fields);
      setSubmitError(ae.message);
    } finally {
      setSubmitting(false);
    }
  };

  const configField = (f: FieldSpec) => (
    <ConfigField key={f.name} f={f} value={values[f.name] ?? ''} error={errors[f.name] ?? serverErrors[f.name]} onChange={(v) => setField(f.name, v)} />
  );
  const more = spec?.fields.filter((f) => f.more) ?? [];
  const selErr = serverErrors.gpu_ids ?? serverErrors.host ?? serverErrors.world_size ?? serverErrors.pool;
  return (
    <div className="page">
      <div className="page-head">
        <h2>New training</h2>
      </div>
      <form onSubmit={submit} noValidate aria-label="New training">
        <div className="panel">
          <h3>Recipe</h3>
          <div className="form-grid">
            <div className="field">
              <label htmlFor="t-name">Name</label>
              <input id="t-name" value={name} onChange={(e) => setName(e.target.value)} aria-invalid={!!serverErrors.name} required />
              {serverErrors.name && <span className="field-error">{serverErrors.name}</span>}
            </div>
            <div className="field">
              <label htmlFor="t-recipe">Recipe</label>
              <select id="t-recipe" value={recipe ?? ''} onChange={(e) => changeRecipe(e.target.value)} disabled={!spec}>
                {recipes.specs.map((r) => (
                  <option key={r.name} value={r.name}>
                    {r.name}
                  </option>
                ))}
              </select>
              {spec && <span className="field-help">{spec.description}</span>}
            </div>
          </div>
        </div>
        <div className="panel">
          <h3>Config</h3>
          {recipes.error && !spec && (
            <div className="banner-error" role="alert">
              Could not load the recipes: {recipes.error.message}
            </div>
          )}
          {!spec && !recipes.error && <p className="muted">{recipes.loading ? 'Loading recipes…' : 'The server has no recipes installed.'}</p>}
          {spec && (
            <>
              <div className="form-grid">
                {spec.fields.filter((f) => !f.more).map((f) => configField(f))}
              </div>
              {more.length > 0 && (
                <details className="more-fields" open={more.some((f) => errors[f.name] ?? serverErrors[f.name]) || undefined}>
                  <summary>More fields ({more.length})</summary>
                  <div className="form-grid">{more.map((f) => configField(f))}</div>
                </details>
              )}
            </>
          )}
        </div>
        <div className="panel">
          <h3>GPUs</h3>
          {pools.length > 0 && (
            <div className="field" style={{ marginBottom: '0.75rem' }}>
              <label htmlFor="t-where">Where</label>
              <select id="t-where" value={pool} onChange={(e) => { setPool(e.target.value); setFit(null); setServerErrors({}); }}>
                <option value="">The team&apos;s hosts</option>
                {pools.map((p) => (
                  <option key={p.name} value={p.name}>
                    Slurm pool {p.name} (partition {p.partition}{p.gpu_model ? `, ${p.gpu_model}` : ''})
                  </option>
                ))}
                {pools.map((p) => (
                  <option key={`or:${p.name}`} value={`or:${p.name}`}>
                    The team&apos;s hosts, or pool {p.name} when they can never hold it
                  </option>
                ))}
              </select>
            </div>
          )}
          <div className="estimate" data-testid="estimate">
            <span>
              {/* The server's own words and number, so the page and the API never disagree by a rounding. */}
              Memory per GPU:{' '}
              <b data-testid="estimate-need">
                <EstimateLine text={estimateText(advice, ok)} />
              </b>
            </span>
            {advice.needBytes != null && (
              <span className="muted">
                <span className="need-mark" aria-hidden /> on each bar: where this training would bring the GPU's memory
              </span>
            )}
            <span className="field" style={{ flexDirection: 'row', alignItems: 'center', gap: '0.5rem' }}>
              <label htmlFor="t-count">GPUs wanted</label>
              <input id="t-count" type="number" min={1} max={64} value={count} style={{ width: '5rem' }} onChange={(e) => setCount(Math.max(1, Number(e.target.value) || 1))} />
            </span>
            {!onPool && touched && top && (
              <button type="button" onClick={() => setTouched(false)}>
                Use recommended
              </button>
            )}
            <button type="button" onClick={fitToFleet} disabled={!ok || fitting}
                    title={onPool ? "the largest micro-batch, DDP or FSDP, on the pool's declared GPUs" : 'the largest micro-batch, DDP or FSDP, and the fewest GPUs that hold it now'}>
              {fitting ? 'Fitting…' : onPool ? 'Fit to the pool' : 'Fit to the fleet'}
            </button>
          </div>
          {fit && (
            <div className={fit.failed ? 'field-error' : 'candidates'} data-testid="fit-why">
              {fit.text}
            </div>
          )}
          {onPool ? (
            <p className="candidates" data-testid="on-pool">
              {count} GPU{count > 1 ? 's' : ''} in Slurm pool {onPool.name}: Slurm decides when and on which nodes it runs
              {onPool.gpus_per_node && count > onPool.gpus_per_node ? ` (over ${Math.ceil(count / onPool.gpus_per_node)} nodes of ${onPool.gpus_per_node} GPUs)` : ''},
              and it runs as your own Unix account there.
            </p>
          ) : (
            <>
            {top && (
              <div className="candidates">
                Recommended: {top.host} GPU {top.gpu_indexes.join(', ')} ({top.connection}) — {top.reasons.join('; ')}
              </div>
            )}
            {advice.refused && (
              <div className={orPool ? 'candidates' : 'banner-error'} data-testid="refused">
                {orPool ? `The team's hosts can never hold it (${advice.refused}): it goes to Slurm pool ${orPool.name}.` : advice.refused}
              </div>
            )}
            {!advice.refused && advice.waitReason && <div className="candidates">Nothing fits now: {advice.waitReason}</div>}
            {advice.adviceError && <div className="field-help">Could not get a recommendation: {advice.adviceError}</div>}
            <GpuSelector
              gpus={fleet.gpus}
              selection={selection}
              onChange={(s) => {
                setTouched(true);
                setSelection(s);
                setServerErrors(({ gpu_ids: _a, host: _b, world_size: _c, ...rest }) => rest);
              }}
              needBytes={advice.needBytes}
              recommended={top}
              problems={advice.problems}
              warnings={advice.warnings}
            />
            </>
          )}
          {selErr && <div className="field-error">{selErr}</div>}
          <p className="field-help">
            {onPool ? `The pool's scheduler owns its queue: the training waits there with Slurm's reason.` : selection.indexes.length === 0
              ? 'No GPU selected: the server chooses when the training is scheduled.'
              : `${selection.indexes.length} GPU${selection.indexes.length > 1 ? 's (distributed, one rank per GPU)' : ''} on ${selection.host}.`}
          </p>
        </div>
        {submitError && (
          <div className="banner banner-error" role="alert">
            {submitError}
          </div>
        )}
        <div className="actions">
          <button type="submit" className="primary" disabled={!ok || blocked || submitting || !name.trim()}>
            {submitting ? 'Starting…' : 'Start training'}
          </button>
          {!ok && <span className="field-error">Fix the highlighted fields.</span>}
          {ok && blocked && <span className="field-error">Change the request: the server can never place it.</span>}
        </div>
      </form>
    </div>
  );
}
