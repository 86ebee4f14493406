import { useState } from 'react';
import { Link, useParams } from 'react-router-dom';
import { endpoints } from '../../api/endpoints';
import type { SweepDetail, SweepTrial } from '../../api/types';
import { useQuery } from '../../api/useQuery';
import { Chart } from '../../components/Chart';
import { ErrorState, Loading, Pill } from '../../components/States';
import { fmtLoss } from '../../lib/format';
import { ParamScatter } from './ParamScatter';
import { BEST_COLOR, colorOf, dashOf, overlay, paramNames, paramText, parallelText, rungText } from './sweeps';

/** One sweep: its trials (parameters, state, metric, GPU), their curves together, the best, metric by parameter. */
export function SweepDetailPage() {
  const { id = '' } = useParams();
  const q = useQuery(`sweep|${id}`, (signal) => endpoints.sweep(id, signal), 3000);
  const curves = useQuery(`sweep-curves|${id}`, (signal) => endpoints.sweepCurves(id, signal), 5000);
  const [cancelling, setCancelling] = useState(false);
  if (q.error && !q.data) return <div className="page"><ErrorState error={q.error} onRetry={q.reload} /></div>;
  if (!q.data) return <div className="page"><Loading what="the sweep" /></div>;
  const s = q.data;
  const names = paramNames(s.trials);
  const lines = curves.data ? overlay(curves.data) : null;
  const cancel = async () => {
    setCancelling(true);
    try {
      await endpoints.cancelSweep(s.id);
      q.reload();
    } finally {
      setCancelling(false);
    }
  };
  return (
    <div className="page" data-testid="sweep-page">
      <div className="page-head">
        <h2>
          {s.name} <Pill value={s.status} />
        </h2>
        {s.status === 'running' && (
          <button type="button" onClick={cancel} disabled={cancelling}>
            Cancel sweep
          </button>
        )}
      </div>
      <p className="field-help">
        {s.method + (s.early_stopping ? ' + ASHA' : '')} · {s.metric} ({s.direction}) ·{' '}
        {parallelText(s.total_trials, s.parallel)}{s.status_reason ? ` · ${s.status_reason}` : ''}
      </p>
      <Best sweep={s} />
      {lines && lines.numbers.length > 0 && (
        <Chart testId="sweep-curves" title={`${s.metric} by step, every trial`} time={false} height={260}
          series={lines.numbers.map((n, i) =>
            n === s.best_trial ? { label: `trial ${n}`, color: BEST_COLOR, width: 3 } : { label: `trial ${n}`, color: colorOf(i), dash: dashOf(i), width: 1 })}
          data={lines.data} yFormat={fmtLoss} />
      )}
      <div className="scatters">
        {names.map((p) => (
          <ParamScatter key={p} trials={s.trials} param={p} metric={s.metric} best={s.best_trial} />
        ))}
      </div>
      <TrialsTable trials={s.trials} names={names} best={s.best_trial} />
    </div>
  );
}

function Best({ sweep }: { sweep: SweepDetail }) {
  const b = sweep.best;
  if (!b) return null;
  return (
    <div className="card best" data-testid="sweep-best">
      <strong>Best: trial {b.number}</strong> — {Object.entries(b.params).map(([k, v]) => `${k}=${paramText(v)}`).join(', ')} —{' '}
      {sweep.metric} {fmtLoss(b.metric)}
      {b.training_id && (
        <>
          {' '}
          (<Link to={`/trainings/${b.training_id}`}>training</Link>)
        </>
      )}
    </div>
  );
}

function TrialsTable({ trials, names, best }: { trials: SweepTrial[]; names: string[]; best: number | null }) {
  return (
    <table className="table" data-testid="trials-table">
      <thead>
        <tr>
          <th>#</th>
          {names.map((n) => (
            <th key={n}>{n}</th>
          ))}
          <th>State</th>
          <th>Metric</th>
          <th>Rung</th>
          <th>Step</th>
          <th>GPU</th>
          <th>Reason</th>
        </tr>
      </thead>
      <tbody>
        {trials.map((t) => (
          <tr key={t.number} data-trial={t.number} className={t.number === best ? 'row-best' : undefined} title={t.reason ?? undefined}>
            <td>{t.training_id ? <Link to={`/trainings/${t.training_id}`}>{t.number}</Link> : t.number}</td>
            {names.map((n) => (
              <td key={n}>{paramText(t.params[n])}</td>
            ))}
            <td>
              <Pill value={t.state} title={t.reason ?? undefined} />
            </td>
            <td>{t.metric == null ? '–' : fmtLoss(t.metric)}</td>
            <td>{rungText(t)}</td>
            <td>
              {t.step ?? 0}/{t.max_steps ?? '?'}
            </td>
            <td>{t.host && t.gpu_ids?.length ? `${t.host}:${t.gpu_ids.join(',')}` : '–'}</td>
            <td className="trial-reason">{t.reason ?? '–'}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
