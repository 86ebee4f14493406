import { useSearchParams } from 'react-router-dom';
import { endpoints } from '../api/endpoints';
import { useQuery } from '../api/useQuery';

/** The signed-in person's name, or null while unknown (or when no one is signed in). */
export function useMe(): string | null {
  const q = useQuery('whoami', (s) => endpoints.whoami(s));
  return q.data?.name ?? null;
}

/** "Only mine": the owner filter set to the signed-in person. */
export function MineFilter({ owner, onOwner }: { owner: string; onOwner: (v: string) => void }) {
  const me = useMe();
  return (
    <div className="field field-inline">
      <label>
        <input type="checkbox" disabled={!me} checked={!!me && owner === me} onChange={(e) => onOwner(e.target.checked && me ? me : '')} /> Only mine
      </label>
    </div>
  );
}

/**
 * A list's status and owner filters, kept in the address (so a filtered list can be shared as a link).
 * Changing a filter drops `offset`: page 3 of another filter is not where one wants to be.
 */
export function useListFilters() {
  const [params, setParams] = useSearchParams();
  const set = (k: string, v: string) => {
    const next = new URLSearchParams(params);
    if (v) next.set(k, v);
    else next.delete(k);
    if (k !== 'offset') next.delete('offset');
    setParams(next, { replace: true });
  };
  return {
    status: params.get('status') ?? '',
    owner: params.get('owner') ?? '',
    offset: Math.max(0, Number(params.get('offset')) || 0),
    set,
  };
}

/** The filter bar: status (one of `statuses`, or any), owner (a name, or anyone), and "Only mine". */
export function ListFilters({ idPrefix, statuses, status, owner, set }: {
  idPrefix: string;
  statuses: readonly string[];
  status: string;
  owner: string;
  set: (k: string, v: string) => void;
}) {
  return (
    <div className="filters">
      <div className="field">
        <label htmlFor={`${idPrefix}-status`}>Status</label>
        <select id={`${idPrefix}-status`} value={status} onChange={(e) => set('status', e.target.value)}>
          <option value="">any</option>
          {statuses.map((s) => (
            <option key={s}>{s}</option>
          ))}
        </select>
      </div>
      <div className="field">
        <label htmlFor={`${idPrefix}-owner`}>Owner</label>
        <input id={`${idPrefix}-owner`} value={owner} placeholder="anyone" onChange={(e) => set('owner', e.target.value)} />
      </div>
      <MineFilter owner={owner} onOwner={(v) => set('owner', v)} />
    </div>
  );
}
