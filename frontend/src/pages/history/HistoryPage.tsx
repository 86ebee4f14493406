import { useEffect, useState } from 'react';
import { useSearchParams } from 'react-router-dom';
import { endpoints } from '../../api/endpoints';
import { useQuery } from '../../api/useQuery';
import { Empty, ErrorState, Loading } from '../../components/States';
import { useFleet } from '../fleet/useFleet';
import { HistoryCharts } from './HistoryCharts';
import { POINTS, RANGES, type RangeKey } from './history';

export function HistoryPage() {
  const [params, setParams] = useSearchParams();
  const target = params.get('gpu') ?? 'aggregate';
  const range = (params.get('range') as RangeKey) in RANGES ? (params.get('range') as RangeKey) : '1h';
  const fleet = useFleet(30_000);
  const set = (k: string, v: string) => {
    const next = new URLSearchParams(params);
    next.set(k, v);
    setParams(next, { replace: true });
  };

  // The range ends now at each fetch; the key leaves the clock out so a
  // refresh keeps the charts on screen instead of flashing a loading state.
  const [empty, setEmpty] = useState(false);
  const q = useQuery(
    `${target}|${range}`,
    (signal) => {
      const to = new Date();
      const from = new Date(to.getTime() - RANGES[range].seconds * 1000);
      const query = { ...(target === 'aggregate' ? { aggregate: true } : { gpu: target }), from: from.toISOString(), to: to.toISOString(), points: POINTS };
      return endpoints.history(query, signal);
    },
    // Nothing stored yet (a fresh server): look again soon.
    empty ? 5_000 : RANGES[range].refreshMs,
  );
  const isEmpty = !!q.data && (q.data.series ?? []).every((s) => !s.points?.length);
  useEffect(() => setEmpty(isEmpty), [isEmpty]);

  return (
    <div className="page">
      <div className="page-head">
        <h2>History</h2>
      </div>
      <div className="filters">
        <div className="field">
          <label htmlFor="hist-gpu">GPU</label>
          <select id="hist-gpu" value={target} onChange={(e) => set('gpu', e.target.value)}>
            <option value="aggregate">All GPUs (aggregate)</option>
            {/* The chosen GPU stays selectable before the fleet list has loaded. */}
            {target !== 'aggregate' && !fleet.gpus.some((g) => `${g.host}:${g.index}` === target) && <option value={target}>{target}</option>}
            {fleet.gpus.map((g) => (
              <option key={g.id} value={`${g.host}:${g.index}`}>
                {g.host} · GPU {g.index} · {g.name}
              </option>
            ))}
          </select>
        </div>
        <div className="field">
          <span className="field-help">Time range</span>
          <div className="toggle" role="group" aria-label="Time range">
            {(Object.keys(RANGES) as RangeKey[]).map((r) => (
              <button key={r} type="button" aria-pressed={r === range} className={r === range ? 'active' : ''} onClick={() => set('range', r)}>
                {RANGES[r].label}
              </button>
            ))}
          </div>
        </div>
        <button type="button" onClick={q.reload}>
          Refresh
        </button>
      </div>
      {q.error && !q.data ? (
        <ErrorState error={q.error} onRetry={q.reload} />
      ) : !q.data ? (
        <Loading what="history" />
      ) : isEmpty ? (
        <Empty title="No samples in this range.">The agent stores one sample per GPU per second; pick a longer range or wait a moment.</Empty>
      ) : (
        <HistoryCharts data={q.data} />
      )}
    </div>
  );
}
