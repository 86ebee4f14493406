import { useState } from 'react';
import type { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import type { Session } from '../../api/types';
import { Pill } from '../../components/States';
import { gpusText, idleText, isLive, shellCommands, timeLeft } from './sessionText';

/** The extension one click of "Extend" asks for. */
export const EXTEND_HOURS = 1;

function ShellHint({ s }: { s: Session }) {
  const cmd = shellCommands(s);
  if (!cmd || s.mode !== 'shell') return null;
  return (
    <div className="muted" style={{ fontSize: '0.78rem' }} data-testid="shell-command">
      <code>{cmd.here}</code>
      {cmd.ssh && (
        <>
          {' '}· elsewhere: <code>{cmd.ssh}</code>
        </>
      )}
    </div>
  );
}

export function SessionRow({ s, onChanged }: { s: Session; onChanged: () => void }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const act = async (what: () => Promise<unknown>) => {
    setBusy(true);
    setError(null);
    try {
      await what();
      onChanged();
    } catch (e) {
      setError((e as ApiError).message);
    } finally {
      setBusy(false);
    }
  };
  const live = isLive(s) || s.status === 'queued';
  return (
    <tr data-testid={`session-row-${s.id}`}>
      <td>
        {s.name}
        <div className="muted" style={{ fontSize: '0.78rem' }}>
          {s.mode === 'jupyter' ? 'Jupyter' : 'shell'}
        </div>
        <ShellHint s={s} />
      </td>
      <td>
        <Pill value={s.status} title={s.wait_reason ?? s.status_reason ?? undefined} />
        {s.status === 'queued' && s.wait_reason && <div className="field-help">{s.wait_reason}</div>}
        {s.end_reason && <div className="field-help">ended: {s.end_reason.replace('_', ' ')}</div>}
      </td>
      <td>{gpusText(s)}</td>
      <td>{s.host ?? '—'}</td>
      <td>{s.owner}</td>
      <td className="num">{timeLeft(s)}</td>
      <td>{idleText(s)}</td>
      <td>
        <div className="actions">
          {s.url && s.status === 'running' && (
            <a className="button primary" href={s.url} target="_blank" rel="noopener noreferrer">
              Open
            </a>
          )}
          {isLive(s) && (
            <button type="button" disabled={busy} title={`Move the time limit ${EXTEND_HOURS} h later`}
              onClick={() => act(() => endpoints.extendSession(s.id, EXTEND_HOURS))}>
              Extend
            </button>
          )}
          {live && (
            <button type="button" disabled={busy} onClick={() => act(() => endpoints.stopSession(s.id))}>
              Stop
            </button>
          )}
        </div>
        {error && (
          <div className="field-error" role="alert">
            {error}
          </div>
        )}
      </td>
    </tr>
  );
}
