import { useState, type FormEvent } from 'react';
import { Link, useNavigate } from 'react-router-dom';
import type { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import type { Session } from '../../api/types';
import { shellCommands } from './sessionText';

interface Values {
  gpus: string;
  memoryGiB: string;
  hours: string;
  mode: 'jupyter' | 'shell';
}

/** The form's values as the API's body, or the problems per field (checked again by the server). */
export function toBody(v: Values): { body: { gpus: number; memory_mb: number | null; hours: number; jupyter: boolean } | null; errors: Record<string, string> } {
  const errors: Record<string, string> = {};
  const gpus = Number(v.gpus);
  if (!Number.isInteger(gpus) || gpus < 1 || gpus > 64) errors.gpus = 'a whole number from 1 to 64';
  const memory = v.memoryGiB.trim() === '' ? null : Number(v.memoryGiB);
  if (memory !== null && !(memory > 0)) errors.memory_mb = 'a size in GiB above 0, or empty for whole GPUs';
  const hours = Number(v.hours);
  if (!(hours > 0)) errors.hours = 'hours above 0';
  if (Object.keys(errors).length) return { body: null, errors };
  return { body: { gpus, memory_mb: memory === null ? null : Math.round(memory * 1024), hours, jupyter: v.mode === 'jupyter' }, errors };
}

function ShellReady({ s }: { s: Session }) {
  const cmd = shellCommands({ ...s, shell: s.shell ?? `gpufleet session shell ${s.id}` });
  return (
    <div className="panel" data-testid="shell-started">
      <h3>Shell session {s.name}</h3>
      <p>
        It is {s.status}. Once it runs, open the shell on its host with <code>{cmd?.here}</code>
      </p>
      <p>
        From another machine: <code>{cmd?.ssh ?? `ssh -t <host> ${cmd?.here}`}</code>
        {!s.host && <span className="muted"> (the host shows on the Sessions page once the session is placed)</span>}
      </p>
      <Link to="/sessions">All sessions</Link>
    </div>
  );
}

export function NewSessionPage() {
  const navigate = useNavigate();
  const [values, setValues] = useState<Values>({ gpus: '1', memoryGiB: '', hours: '4', mode: 'jupyter' });
  const [serverErrors, setServerErrors] = useState<Record<string, string>>({});
  const [submitError, setSubmitError] = useState<string | null>(null);
  const [submitting, setSubmitting] = useState(false);
  const [shell, setShell] = useState<Session | null>(null);
  const { body, errors } = toBody(values);
  const shown = { ...serverErrors, ...errors };
  const set = (k: keyof Values, v: string) => {
    setValues((old) => ({ ...old, [k]: v }));
    setServerErrors({});
  };

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (!body || submitting) return;
    setSubmitting(true);
    setSubmitError(null);
    try {
      const s = await endpoints.createSession(body);
      if (s.mode === 'shell') setShell(s);
      else navigate('/sessions');
    } catch (err) {
      const ae = err as ApiError;
      setServerErrors(ae.fields ?? {});
      setSubmitError(ae.message);
    } finally {
      setSubmitting(false);
    }
  };

  if (shell) return <div className="page">{<ShellReady s={shell} />}</div>;
  const field = (id: string, key: keyof Values, label: string, help: string, error?: string, placeholder?: string) => (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <input id={id} value={values[key]} inputMode="decimal" placeholder={placeholder} aria-invalid={!!error}
        onChange={(e) => set(key, e.target.value)} />
      {error ? <span className="field-error">{error}</span> : <span className="field-help">{help}</span>}
    </div>
  );
  return (
    <div className="page">
      <div className="page-head">
        <h2>New session</h2>
      </div>
      <form onSubmit={submit} noValidate aria-label="New session">
        <div className="panel">
          <div className="form-grid">
            {field('n-gpus', 'gpus', 'GPUs', 'reserved for the session until it ends', shown.gpus)}
            {field('n-memory', 'memoryGiB', 'Memory per GPU (GiB)', 'empty: whole GPUs, not shared', shown.memory_mb, 'whole GPU')}
            {field('n-hours', 'hours', 'Hours', 'the time limit; extend it later from the Sessions page', shown.hours)}
            <fieldset className="field">
              <legend>Kind</legend>
              <label>
                <input type="radio" name="mode" checked={values.mode === 'jupyter'} onChange={() => set('mode', 'jupyter')} /> Jupyter notebook
              </label>
              <label>
                <input type="radio" name="mode" checked={values.mode === 'shell'} onChange={() => set('mode', 'shell')} /> Shell
              </label>
              <span className="field-help">
                {values.mode === 'jupyter'
                  ? 'JupyterLab, opened in the browser through gpufleet ("Open" on the Sessions page); it needs the sessions extra on the GPU hosts (scripts/install.sh installs it; else pip install \'gpufleet[sessions]\')'
                  : 'you get a command that opens the shell'}
              </span>
            </fieldset>
          </div>
        </div>
        {submitError && (
          <div className="banner banner-error" role="alert">
            {submitError}
          </div>
        )}
        <div className="actions">
          <button type="submit" className="primary" disabled={!body || submitting}>
            {submitting ? 'Starting…' : 'Start session'}
          </button>
        </div>
      </form>
    </div>
  );
}
