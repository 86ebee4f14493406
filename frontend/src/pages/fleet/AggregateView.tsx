import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { endpoints } from '../../api/endpoints';
import { useQuery } from '../../api/useQuery';
import type { ChannelMessage } from '../../api/live';
import type { Aggregated, GPU } from '../../api/types';
import { useChannel } from '../../api/useLive';
import { Bar } from '../../components/Bar';
import { Chart } from '../../components/Chart';
import { fmtBytes, fmtPct, fmtTemp, fmtWatts } from '../../lib/format';
import { Ring } from '../../lib/ring';
import { aggregate, aggregateOf } from './aggregate';

const SERIES = [
  { label: 'avg utilization %', color: '#4fb3ff', fill: true },
  { label: 'memory used %', color: '#f5b945' },
];

function Tiles({ a, testId }: { a: Aggregated; testId?: string }) {
  const memPct = a.total_memory_total ? (100 * a.total_memory_used) / a.total_memory_total : null;
  return (
    <div className="tiles" data-testid={testId}>
      <div className="tile">
        <div className="tile-label">GPUs</div>
        <div className="tile-value" data-testid="agg-gpu-count">
          {a.gpu_count}
        </div>
        {!!a.lost_count && <div className="tile-sub bad">{a.lost_count} lost</div>}
      </div>
      <div className="tile tile-wide">
        <Bar label="Memory" value={a.total_memory_used} max={a.total_memory_total} text={`${fmtBytes(a.total_memory_used)} / ${fmtBytes(a.total_memory_total)} (${fmtPct(memPct)})`} />
      </div>
      <div className="tile tile-wide">
        <Bar label="Average utilization" value={a.average_utilization} text={fmtPct(a.average_utilization)} tone="ok" />
      </div>
      <div className="tile">
        <div className="tile-label">Max temperature</div>
        <div className="tile-value">{fmtTemp(a.max_temperature)}</div>
      </div>
      <div className="tile">
        <div className="tile-label">Total power</div>
        <div className="tile-value">{fmtWatts(a.total_power_draw)}</div>
      </div>
    </div>
  );
}

/** The fleet's stored last ten minutes, folded into one series by the server. */
function useRecentAggregate(enabled: boolean) {
  return useQuery(enabled ? 'aggregate-recent' : null, (signal) => {
    const to = new Date();
    return endpoints.history({ aggregate: true, from: new Date(to.getTime() - 600_000).toISOString(), to: to.toISOString(), points: 300 }, signal);
  });
}

function useAggregateChannel(channel: string, initial: Aggregated, seed?: ReturnType<typeof useRecentAggregate>['data']) {
  const ring = useRef({ util: new Ring(600), mem: new Ring(600) });
  const [latest, setLatest] = useState<Aggregated | null>(null);
  const [version, setVersion] = useState(0);
  const onMessage = useCallback((msg: ChannelMessage) => {
    const { fleet } = aggregateOf(msg.data);
    if (!fleet) return;
    const t = Date.now() / 1000;
    ring.current.util.push(t, fleet.average_utilization);
    ring.current.mem.push(t, fleet.total_memory_total ? (100 * fleet.total_memory_used) / fleet.total_memory_total : null);
    setLatest(fleet);
    setVersion((v) => v + 1);
  }, []);
  useChannel(channel, onMessage);
  // Start the chart from stored history rather than from its right edge.
  // The server pools every GPU's samples per bucket, so memory_used_avg is a
  // per-GPU mean: compare it with the mean GPU size.
  const memTotal = initial.gpu_count ? initial.total_memory_total / initial.gpu_count : 0;
  useEffect(() => {
    const points = seed?.series[0]?.points ?? [];
    if (!points.length) return;
    ring.current.util.backfill(points.map((p) => [Date.parse(p.t) / 1000, p.utilization_avg ?? null]));
    ring.current.mem.backfill(points.map((p) => [Date.parse(p.t) / 1000, p.memory_used_avg != null && memTotal ? (100 * p.memory_used_avg) / memTotal : null]));
    setVersion((v) => v + 1);
  }, [seed, memTotal]);
  const data = useMemo(() => {
    const [x, u] = ring.current.util.columns();
    const [, m] = ring.current.mem.columns();
    return [x, u, m];
    // The rings mutate in place; `version` is what says they changed.
  }, [version]);
  return { value: latest ?? initial, data };
}

function HostRow({ host, gpus }: { host: string; gpus: GPU[] }) {
  const initial = useMemo(() => aggregate(gpus.map((g) => g.live)), [gpus]);
  const { value } = useAggregateChannel(`host:${host}`, initial);
  const memPct = value.total_memory_total ? (100 * value.total_memory_used) / value.total_memory_total : null;
  return (
    <tr data-testid={`host-row-${host}`}>
      <th scope="row">{host}</th>
      <td>{value.gpu_count}</td>
      <td>
        {fmtBytes(value.total_memory_used)} / {fmtBytes(value.total_memory_total)} <span className="muted">({fmtPct(memPct)})</span>
      </td>
      <td>{fmtPct(value.average_utilization)}</td>
      <td>{fmtTemp(value.max_temperature)}</td>
      <td>{fmtWatts(value.total_power_draw)}</td>
    </tr>
  );
}

export function AggregateView({ gpus, byHost }: { gpus: GPU[]; byHost: [string, GPU[]][] }) {
  const initial = useMemo(() => aggregate(gpus.map((g) => g.live)), [gpus]);
  const recent = useRecentAggregate(gpus.length > 0);
  const { value, data } = useAggregateChannel('aggregate', initial, recent.data);
  return (
    <section aria-label="Aggregated view" data-testid="aggregate-view">
      <Tiles a={value} testId="fleet-tiles" />
      <div className="panel">
        <h3>
          Fleet, live <span className="muted">· last 10 minutes</span>
        </h3>
        <Chart series={SERIES} data={data} height={180} yMin={0} yMax={100} windowSec={600} yFormat={(v) => `${Math.round(v)}%`} testId="aggregate-chart" />
      </div>
      <div className="panel">
        <h3>Per host</h3>
        <table className="table">
          <thead>
            <tr>
              <th scope="col">Host</th>
              <th scope="col">GPUs</th>
              <th scope="col">Memory</th>
              <th scope="col">Avg util</th>
              <th scope="col">Max temp</th>
              <th scope="col">Power</th>
            </tr>
          </thead>
          <tbody>
            {byHost.map(([h, list]) => (
              <HostRow key={h} host={h} gpus={list} />
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}
