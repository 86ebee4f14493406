import type { ReactNode } from 'react';
import type { ApiError } from '../api/client';

export function Loading({ what }: { what: string }) {
  return (
    <div className="state state-loading" role="status">
      Loading {what}…
    </div>
  );
}

export function Empty({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="state state-empty" role="status">
      <strong>{title}</strong>
      {children && <div className="state-body">{children}</div>}
    </div>
  );
}

export function ErrorState({ error, onRetry }: { error: ApiError; onRetry?: () => void }) {
  return (
    <div className="state state-error" role="alert">
      <strong>{error.unreachable ? 'Server unreachable' : `Error ${error.status}`}</strong>
      <div className="state-body">{error.message}</div>
      {onRetry && (
        <button type="button" onClick={onRetry}>
          Retry
        </button>
      )}
    </div>
  );
}

const STATE_TEXT: Record<string, string> = {
  free: 'free',
  shared: 'shared',
  busy: 'busy',
  'foreign-busy': 'foreign',
  drained: 'drained',
  unhealthy: 'unhealthy',
};

/** A GPU's availability state, or a training's status, as a coloured pill. */
export function Pill({ value, title }: { value: string; title?: string }) {
  return (
    <span className={`pill pill-${value.replace(/[^a-z-]/g, '')}`} title={title}>
      {STATE_TEXT[value] ?? value}
    </span>
  );
}
