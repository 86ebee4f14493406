/** The Team page's shared pieces: a section's frame, a refusal shown beside its control, a limit field's value, and one change at a time. */
import { useState, type ReactNode } from 'react';
import { ApiError } from '../../api/client';

/** Run one change, then reload what it touched; a refusal is shown beside the control, in the server's words. */
export function useAction(onDone: () => void) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const run = async (fn: () => Promise<unknown>) => {
    setBusy(true);
    setError(null);
    try {
      await fn();
      onDone();
      return true;
    } catch (e) {
      setError(e instanceof ApiError ? e.message : String(e));
      return false;
    } finally {
      setBusy(false);
    }
  };
  return { busy, error, run };
}

export function Section({ title, help, children }: { title: string; help: ReactNode; children: ReactNode }) {
  return (
    <section className="panel team-section" aria-label={title}>
      <h3>{title}</h3>
      <p className="field-help">{help}</p>
      {children}
    </section>
  );
}

export function Refusal({ error }: { error: string | null }) {
  return error ? (
    <div className="banner banner-error" role="alert">
      {error}
    </div>
  ) : null;
}

/** Blank is "no limit" (null); anything else must be a number. */
export function limitValue(text: string): number | null {
  return text.trim() === '' ? null : Number(text);
}

