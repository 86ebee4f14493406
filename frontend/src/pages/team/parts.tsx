/** The Team page's shared pieces: a section's frame, a refusal shown beside its control, and a limit field's value. */
import type { ReactNode } from 'react';

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
