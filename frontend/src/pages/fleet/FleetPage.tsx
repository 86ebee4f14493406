import { useMemo } from 'react';
import { useSearchParams } from 'react-router-dom';
import { endpoints } from '../../api/endpoints';
import type { Booking, HistorySeries } from '../../api/types';
import { useQuery } from '../../api/useQuery';
import { Empty, ErrorState, Loading } from '../../components/States';
import { AggregateView } from './AggregateView';
import { GpuCard } from './GpuCard';
import { PoolsSection } from './PoolsSection';
import { TopologyView } from './TopologyView';
import { useFleet } from './useFleet';

type View = 'gpus' | 'aggregate' | 'topology';
const VIEWS: [View, string][] = [
  ['gpus', 'Per GPU'],
  ['aggregate', 'Aggregated'],
  ['topology', 'Topology'],
];

export function ViewToggle({ view, onChange }: { view: View; onChange: (v: View) => void }) {
  return (
    <div className="toggle" role="group" aria-label="Fleet view">
      {VIEWS.map(([v, label]) => (
        <button key={v} type="button" aria-pressed={view === v} className={view === v ? 'active' : ''} onClick={() => onChange(v)}>
          {label}
        </button>
      ))}
    </div>
  );
}

/** The last five minutes of every GPU, once, to start the mini charts full. */
function useRecentHistory(enabled: boolean): Map<string, HistorySeries> {
  const q = useQuery(enabled ? 'fleet-recent' : null, (signal) => {
    const to = new Date();
    const from = new Date(to.getTime() - 300_000);
    return endpoints.history({ from: from.toISOString(), to: to.toISOString(), points: 150 }, signal);
  });
  return useMemo(() => new Map((q.data?.series ?? []).map((s) => [`${s.host}:${s.gpu_index}`, s])), [q.data]);
}

/** Each GPU's booking now or next (within the booking horizon), by host:index. */
function useNextBookings(enabled: boolean): Map<string, Booking> {
  const q = useQuery(enabled ? 'fleet-bookings' : null, (signal) => {
    const now = new Date();
    return endpoints.bookings({ since: now.toISOString(), until: new Date(now.getTime() + 28 * 86_400_000).toISOString() }, signal);
  }, 60_000);
  return useMemo(() => {
    const next = new Map<string, Booking>();
    for (const b of q.data?.data ?? []) // by start: the first one met is the next
      for (const g of b.gpus) if (!next.has(`${g.host}:${g.index}`)) next.set(`${g.host}:${g.index}`, b);
    return next;
  }, [q.data]);
}

/** The seed's SystemMonitor: the whole fleet, per GPU or aggregated, live. */
export function FleetPage() {
  const [params, setParams] = useSearchParams();
  const view = (params.get('view') as View) || 'gpus';
  const fleet = useFleet();
  const setView = (v: View) => setParams(v === 'gpus' ? {} : { view: v }, { replace: true });
  const seeds = useRecentHistory(view === 'gpus' && fleet.gpus.length > 0);
  const booked = useNextBookings(view === 'gpus' && fleet.gpus.length > 0);
  const me = useQuery('whoami', (signal) => endpoints.whoami(signal));
  const admin = me.data?.role === 'admin';

  let body;
  if (fleet.error && !fleet.data) body = <ErrorState error={fleet.error} onRetry={fleet.reload} />;
  else if (!fleet.data) body = <Loading what="GPUs" />;
  else if (fleet.gpus.length === 0)
    body = (
      <Empty title="No GPUs found.">
        No host has registered a GPU yet. Start a worker on a GPU host (<code>gpufleet worker</code>), or try gpufleet without one:{' '}
        <code>GPUFLEET_SIMULATE=4xH100-80GB gpufleet serve</code>.
      </Empty>
    );
  else if (view === 'aggregate') body = <AggregateView gpus={fleet.gpus} byHost={fleet.byHost} />;
  else if (view === 'topology') body = <TopologyView />;
  else
    body = (
      <div data-testid="gpu-view">
        {fleet.byHost.map(([host, gpus]) => (
          <section key={host} className="host-group" aria-label={`Host ${host}`}>
            <h3 className="host-title">
              {host} <span className="muted">· {gpus.length} GPU{gpus.length === 1 ? '' : 's'}</span>
            </h3>
            <div className="gpu-grid">
              {gpus.map((g) => (
                <GpuCard key={g.id} gpu={g} seed={seeds.get(`${g.host}:${g.index}`)} admin={admin} onChanged={fleet.reload}
                         nextBooking={booked.get(`${g.host}:${g.index}`)} />
              ))}
            </div>
          </section>
        ))}
      </div>
    );

  return (
    <div className="page">
      <div className="page-head">
        <h2>Fleet</h2>
        <span className="muted" data-testid="gpu-total">
          {fleet.data ? `${fleet.gpus.length} GPU${fleet.gpus.length === 1 ? '' : 's'} on ${fleet.byHost.length} host${fleet.byHost.length === 1 ? '' : 's'}` : ''}
        </span>
        <ViewToggle view={view} onChange={setView} />
      </div>
      {fleet.error && fleet.data && <div className="banner banner-error">Refresh failed: {fleet.error.message} Showing the last known state.</div>}
      {body}
      {view === 'gpus' && <PoolsSection />}
    </div>
  );
}
