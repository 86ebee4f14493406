import { useSearchParams } from 'react-router-dom';
import { endpoints } from '../../api/endpoints';
import { useQuery } from '../../api/useQuery';
import { Empty, ErrorState, Loading } from '../../components/States';
import type { Usage } from '../../api/types';
import { fmtBytes } from '../../lib/format';
import { UsageChart } from './UsageChart';
import { fmtHours, RANGE_DAYS, rangeOf, toGrid, type Measure, type RangeDays } from './usage';

const BY = { user: 'By user', group: 'By group' } as const;
const MEASURES: Record<Measure, string> = { held: 'Held', used: 'Used' };

/** GPU-hours per UTC day and user or group: a stacked chart and the table under it. */
export function UsagePage() {
  const [params, setParams] = useSearchParams();
  const by = params.get('by') === 'group' ? 'group' : 'user';
  const days = (Number(params.get('days')) in RANGE_DAYS ? Number(params.get('days')) : 7) as RangeDays;
  const measure: Measure = params.get('measure') === 'used' ? 'used' : 'held';
  const set = (k: string, v: string) => {
    const next = new URLSearchParams(params);
    next.set(k, v);
    setParams(next, { replace: true });
  };
  const range = rangeOf(days);
  const q = useQuery(`${by}|${range.from}|${range.to}`, (signal) => endpoints.usage({ by, ...range }, signal), 60_000);
  const grid = q.data ? toGrid(q.data.data, q.data.from, q.data.to, measure) : null;
  // Beside the team's hosts, what ran on Slurm pools (a part of held: Slurm reports no utilisation).
  const onPools = !!q.data?.data.some((r) => r.gpu_seconds_pool > 0);
  // Bookings: the GPU time booked, and the part the booker's own work used.
  const booked = !!q.data?.data.some((r) => r.gpu_seconds_booked > 0);

  return (
    <div className="page">
      <div className="page-head">
        <h2>Usage</h2>
      </div>
      <div className="filters">
        <Toggle label="Group rows" options={BY} value={by} onPick={(v) => set('by', v)} />
        <Toggle label="Range" options={RANGE_DAYS} value={String(days)} onPick={(v) => set('days', v)} />
        <Toggle label="GPU time" options={MEASURES} value={measure} onPick={(v) => set('measure', v)} />
      </div>
      <p className="field-help">
        GPU-hours per UTC day. Held: the time GPUs were reserved for a training. Used: held time weighted by the GPUs'
        utilisation. Booked, where there are bookings: the time they held GPUs, and how much of it the booker used.
      </p>
      {q.error && <ErrorState error={q.error} onRetry={q.reload} />}
      {!grid && !q.error && <Loading what="usage" />}
      {grid && grid.names.length === 0 && <Empty title="No GPU was held in this range." />}
      {grid && grid.names.length > 0 && (
        <>
          <UsageChart grid={grid} unit={`GPU-hours ${measure}`} />
          <table className="table" data-testid="usage-table">
            <thead>
              <tr>
                <th>Day</th>
                <th>{by === 'group' ? 'Group' : 'User'}</th>
                <th>GPU-hours held</th>
                <th>GPU-hours used</th>
                <th>Trainings</th>
                {onPools && <th title="The part of held that ran on Slurm pools, from Slurm's own accounting">Of held, on pools</th>}
                {booked && <th title="GPU time the bookings held (a cancelled or released one until then)">Booked</th>}
                {booked && <th title="The part of booked that the booker's own work held on the booked GPUs">Of booked, used</th>}
              </tr>
            </thead>
            <tbody>
              {[...q.data!.data].reverse().map((r) => (
                <tr key={`${r.day}|${r.name}`} data-name={r.name}>
                  <td>{r.day}</td>
                  <td>{r.name}</td>
                  <td>{fmtHours(r.gpu_hours_held)}</td>
                  <td>{fmtHours(r.gpu_hours_used)}</td>
                  <td>{r.trainings}</td>
                  {onPools && <td>{fmtHours(r.gpu_hours_pool)}</td>}
                  {booked && <td>{fmtHours(r.gpu_hours_booked)}</td>}
                  {booked && <td>{fmtHours(r.gpu_hours_booked_used)}</td>}
                </tr>
              ))}
            </tbody>
            <tfoot>
              <tr>
                <th colSpan={2}>Total ({MEASURES[measure].toLowerCase()})</th>
                <th colSpan={3 + (onPools ? 1 : 0) + (booked ? 2 : 0)}>{fmtHours(grid.totals.reduce((a, b) => a + b, 0))} GPU-hours</th>
              </tr>
            </tfoot>
          </table>
        </>
      )}
      {q.data && <Stored usage={q.data} by={by} />}
    </div>
  );
}

/** What the checkpoint store holds now, per user or group: shown when the server has a store. */
function Stored({ usage, by }: { usage: Usage; by: 'user' | 'group' }) {
  if (!usage.store) return null;
  return (
    <section aria-label="Checkpoints stored" className="usage-stored">
      <h3>Checkpoints stored</h3>
      <p className="field-help">
        What <code>{usage.store}</code> holds now (not per day): each training&apos;s checkpoints, counted for its owner
        {by === 'group' ? ' and each of the owner\'s groups' : ''}.
      </p>
      {usage.stored_error && <p className="error" role="alert">{usage.stored_error}</p>}
      {usage.stored && usage.stored.length === 0 && <Empty title="The store holds no checkpoint yet." />}
      {usage.stored && usage.stored.length > 0 && (
        <table className="table" data-testid="stored-table">
          <thead>
            <tr>
              <th>{by === 'group' ? 'Group' : 'User'}</th>
              <th>Stored</th>
            </tr>
          </thead>
          <tbody>
            {usage.stored.map((r) => (
              <tr key={r.name} data-name={r.name}>
                <td>{r.name}</td>
                <td title={`${r.bytes} bytes`}>{fmtBytes(r.bytes)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function Toggle<K extends string | number>({ label, options, value, onPick }: {
  label: string; options: Record<K, string>; value: string; onPick: (v: string) => void;
}) {
  return (
    <div className="field">
      <span className="field-help">{label}</span>
      <div className="toggle" role="group" aria-label={label}>
        {(Object.keys(options) as K[]).map((k) => (
          <button key={String(k)} type="button" aria-pressed={String(k) === value} className={String(k) === value ? 'active' : ''}
                  onClick={() => onPick(String(k))}>
            {options[k]}
          </button>
        ))}
      </div>
    </div>
  );
}
