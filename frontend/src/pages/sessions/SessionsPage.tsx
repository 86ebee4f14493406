import { useEffect, useRef, useState } from 'react';
import { Link, useSearchParams } from 'react-router-dom';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import { useQuery } from '../../api/useQuery';
import { ListFilters, useListFilters } from '../../components/ListFilters';
import { Empty, ErrorState, Loading } from '../../components/States';
import { SessionRow } from './SessionRow';
import { useSessions } from './useSessions';

/**
 * The open step a notebook's origin sends a page load back to (`/sessions?open=<id>`): a notebook's page
 * opens only with a fresh single-use ticket, so this asks for one and goes back, in this same tab. An
 * admin's joined notebook (`&join=1`) is joined again only by a click: joining is an explicit step.
 */
function OpenStep() {
  const [params] = useSearchParams();
  const id = params.get('open');
  const join = params.get('join') === '1';
  const [error, setError] = useState<string | null>(null);
  const started = useRef(false);
  const go = async () => {
    if (!id) return;
    try {
      const { url } = await (join ? endpoints.joinSession(id) : endpoints.openSession(id));
      window.location.replace(url);
    } catch (e) {
      setError(e instanceof ApiError ? e.message : String(e));
    }
  };
  useEffect(() => {
    if (id && !join && !started.current) {
      started.current = true;
      void go();
    }
  });
  if (!id) return null;
  return (
    <div className="panel" data-testid="open-step">
      {join ? (
        <p>
          Join this notebook again? It is another member&apos;s: joining is recorded on the session, and your browser
          can run code in it as its owner.{' '}
          <button type="button" className="button primary" onClick={() => void go()}>
            Join
          </button>
        </p>
      ) : (
        !error && <p className="muted">Opening the notebook…</p>
      )}
      {error && (
        <div className="field-error" role="alert">
          {error}
        </div>
      )}
    </div>
  );
}

const STATUSES = ['queued', 'starting', 'running', 'stopping', 'stopped', 'failed'];

export function SessionsPage() {
  const { status, owner, set } = useListFilters();
  const q = useSessions(owner, status);
  const rows = q.data?.items ?? [];
  const me = useQuery('whoami', (signal) => endpoints.whoami(signal)).data;
  return (
    <div className="page">
      <div className="page-head">
        <h2>Sessions</h2>
        <span className="muted">{q.data ? `${q.data.total} total` : ''}</span>
        <div className="actions">
          <Link to="/sessions/new" className="button primary">
            New session
          </Link>
        </div>
      </div>
      <OpenStep />
      <ListFilters idPrefix="s" statuses={STATUSES} status={status} owner={owner} set={set} />
      {q.error && !q.data ? (
        <ErrorState error={q.error} onRetry={q.reload} />
      ) : !q.data ? (
        <Loading what="sessions" />
      ) : rows.length === 0 ? (
        <Empty title={status || owner ? 'No session matches these filters.' : 'No sessions yet.'}>
          <Link to="/sessions/new">Start one</Link>, or run <code>gpufleet session start --gpus 1 --jupyter</code>.
        </Empty>
      ) : (
        <div className="panel">
          <table className="table" data-testid="sessions-table">
            <thead>
              <tr>
                <th scope="col">Session</th>
                <th scope="col">Status</th>
                <th scope="col">GPUs</th>
                <th scope="col">Host</th>
                <th scope="col">Owner</th>
                <th scope="col">Time left</th>
                <th scope="col">Idle</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((s) => (
                <SessionRow key={s.id} s={s} me={me} onChanged={q.reload} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
