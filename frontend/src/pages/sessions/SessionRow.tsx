import { endpoints } from '../../api/endpoints';
import type { Session } from '../../api/types';
import { useAction } from '../../api/useAction';
import { Pill } from '../../components/States';
import { gpusText, idleText, isLive, shellCommands, timeLeft } from './sessionText';

/** The extension one click of "Extend" asks for. */
export const EXTEND_HOURS = 1;

/**
 * Open a session's notebook in a new tab. It lives on an origin of its own (a page a member serves must
 * never run where the dashboard's sign-in counts), so the server makes a single-use address that lets
 * this browser in there. The tab is opened at the click (so no popup blocker stops it) and given no
 * handle on this page. `join`: an admin opening another member's notebook (recorded on the session).
 */
export async function openNotebook(id: string, join = false): Promise<void> {
  const tab = window.open('', '_blank');
  if (tab) tab.opener = null;
  try {
    const { url } = await (join ? endpoints.joinSession(id) : endpoints.openSession(id));
    if (tab) tab.location.href = url;
    else window.location.assign(url);
  } catch (e) {
    tab?.close();
    throw e;
  }
}

/** Who is looking: the owner opens her notebook, an admin may join another's, anyone else neither. */
export type Viewer = { name: string; role: string; auth_required: boolean } | undefined;

function NotebookButton({ s, me, busy, act }: { s: Session; me: Viewer; busy: boolean; act: (f: () => Promise<unknown>) => unknown }) {
  if (!s.url || s.status !== 'running') return null;
  if (!me || !me.auth_required || me.name === s.owner) {
    return (
      <button type="button" className="button primary" disabled={busy} onClick={() => act(() => openNotebook(s.id))}>
        Open
      </button>
    );
  }
  if (me.role !== 'admin') return null;
  return (
    <button type="button" disabled={busy} onClick={() => act(() => openNotebook(s.id, true))}
      title={`Open ${s.owner}'s notebook as an admin: recorded on the session; your browser can then run code in it as ${s.owner}`}>
      Join
    </button>
  );
}

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

export function SessionRow({ s, me, onChanged }: { s: Session; me?: Viewer; onChanged: () => void }) {
  const { busy, error, run: act } = useAction(onChanged);
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
          <NotebookButton s={s} me={me} busy={busy} act={act} />
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
