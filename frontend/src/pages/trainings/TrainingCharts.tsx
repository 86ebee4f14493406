import { useMemo, useState } from 'react';
import { endpoints } from '../../api/endpoints';
import type { Training, TrainingMetric } from '../../api/types';
import { useQuery } from '../../api/useQuery';
import { Chart } from '../../components/Chart';
import { fmtLoss, num } from '../../lib/format';
import { columnsFor } from '../history/history';

const PALETTE = ['#4fb3ff', '#f5b945', '#62d48f', '#b48cff', '#ff6b6b', '#5ce1e6', '#ff9f5c', '#e6e65c'];
/** Metric keys that are not parts of the loss. */
const NOT_PARTS = new Set(['samples_per_s', 'lr', 'tokens_per_s', 'grad_norm', 'step_time', 'epoch']);

/** Scores (higher is better, often 0..1): drawn on a chart of their own, never on the loss's axis. */
const SCORE = /acc|f1|precision|recall|auc|score|perplexity|ppl/i;

export function isScore(key: string): boolean {
  return SCORE.test(key);
}

/** The metric keys of recent rows, outside NOT_PARTS and the total. */
function reportedKeys(metrics: TrainingMetric[]): string[] {
  const keys = new Set<string>();
  for (const m of metrics.slice(-50)) for (const k of Object.keys(m.metrics ?? {})) if (!NOT_PARTS.has(k) && k !== 'loss') keys.add(k);
  return [...keys].sort();
}

/** The loss's parts (drawn with the total, on its axis). */
export function lossParts(metrics: TrainingMetric[]): string[] {
  return reportedKeys(metrics).filter((k) => !isScore(k));
}

/** Scores the training reports beside its loss, such as accuracy. */
export function scoreKeys(metrics: TrainingMetric[]): string[] {
  return reportedKeys(metrics).filter(isScore);
}

export function LossChart({ metrics }: { metrics: TrainingMetric[] }) {
  const parts = useMemo(() => lossParts(metrics), [metrics]);
  // The total is drawn last so it stays on top where a part equals it.
  const series = useMemo(
    () => [...parts.map((p, i) => ({ label: p, color: PALETTE[(i + 1) % PALETTE.length], width: 1.5 })), { label: 'loss (total)', color: PALETTE[0], width: 2.5 }],
    [parts],
  );
  const data = useMemo(
    () => [metrics.map((m) => m.step), ...parts.map((p) => metrics.map((m) => num(m.metrics?.[p]))), metrics.map((m) => m.loss)],
    [metrics, parts],
  );
  return <Chart series={series} data={data} height={240} time={false} yFormat={fmtLoss} testId="loss-chart" />;
}

/** What the run reports as its speed: samples per second, else tokens per second (a script's own figure). */
export function throughputKey(metrics: TrainingMetric[]): 'samples_per_s' | 'tokens_per_s' | null {
  const recent = metrics.slice(-50);
  for (const key of ['samples_per_s', 'tokens_per_s'] as const) if (recent.some((m) => num(m.metrics?.[key]) != null)) return key;
  return null;
}

/** Accuracy and other scores on their own axis; nothing when the training reports none. */
export function ScoreChart({ metrics }: { metrics: TrainingMetric[] }) {
  const keys = useMemo(() => scoreKeys(metrics), [metrics]);
  const series = useMemo(() => keys.map((k, i) => ({ label: k, color: PALETTE[(i + 3) % PALETTE.length] })), [keys]);
  const data = useMemo(() => [metrics.map((m) => m.step), ...keys.map((k) => metrics.map((m) => num(m.metrics?.[k])))], [metrics, keys]);
  if (keys.length === 0) return null;
  return <Chart series={series} data={data} height={160} time={false} yFormat={(v) => v.toPrecision(3)} testId="score-chart" />;
}

export function ThroughputChart({ metrics }: { metrics: TrainingMetric[] }) {
  const key = throughputKey(metrics);
  const data = useMemo(() => [metrics.map((m) => m.step), metrics.map((m) => (key ? num(m.metrics?.[key]) : null))], [metrics, key]);
  if (!key) return <p className="muted">The run reports no samples/s or tokens/s (gpufleet.report(step, samples_per_s=…)).</p>;
  const label = key === 'samples_per_s' ? 'samples/s' : 'tokens/s';
  return <Chart series={[{ label, color: PALETTE[2], fill: true }]} data={data} height={160} time={false} yFormat={(v) => v.toFixed(0)} testId="throughput-chart" />;
}

/** Every scalar the run reported besides the loss, in the order first seen. */
export function seriesKeys(metrics: TrainingMetric[]): string[] {
  const keys = new Set<string>();
  for (const m of metrics) for (const [k, v] of Object.entries(m.metrics ?? {})) if (num(v) != null) keys.add(k);
  return [...keys];
}

/** Any reported series, picked by name (lr, grad_norm, accuracy, …). */
export function SeriesChart({ metrics }: { metrics: TrainingMetric[] }) {
  const keys = useMemo(() => seriesKeys(metrics), [metrics]);
  const [picked, setPicked] = useState<string | null>(null);
  const key = picked && keys.includes(picked) ? picked : (keys.find((k) => NOT_PARTS.has(k)) ?? keys[0]);
  const data = useMemo(() => [metrics.map((m) => m.step), metrics.map((m) => num(m.metrics?.[key ?? '']))], [metrics, key]);
  if (!key) return <p className="muted">No other series reported yet.</p>;
  return (
    <div>
      <label className="field-help">
        Series{' '}
        <select aria-label="Series" value={key} onChange={(e) => setPicked(e.target.value)} data-testid="series-picker">
          {keys.map((k) => (
            <option key={k} value={k}>
              {k}
            </option>
          ))}
        </select>
      </label>
      <Chart series={[{ label: key, color: PALETTE[3], width: 1.5 }]} data={data} height={160} time={false} yFormat={fmtLoss} testId="series-chart" />
    </div>
  );
}

/**
 * Ranks whose newest step time is well above the others'. Each rank is
 * compared with the median of the other ranks, so that with two ranks the slow
 * one does not set the bar it is measured against.
 */
export function stragglers(times: number[], factor = 1.3): Set<number> {
  if (times.length < 2) return new Set();
  const out = new Set<number>();
  times.forEach((t, i) => {
    const others = times.filter((_, j) => j !== i).sort((a, b) => a - b);
    const median = others[Math.floor((others.length - 1) / 2)];
    if (median > 0 && t > factor * median) out.add(i);
  });
  return out;
}

/**
 * A y top that ignores a few outliers (the first steps of a run are slow
 * while kernels compile and caches warm up), or undefined when there are none.
 */
export function robustTop(values: number[]): number | undefined {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length < 10) return undefined;
  const p90 = v[Math.floor(v.length * 0.9)];
  return v[v.length - 1] > 3 * p90 ? 1.5 * p90 : undefined;
}

export function RankTimes({ metrics }: { metrics: TrainingMetric[] }) {
  const withRanks = useMemo(() => metrics.filter((m) => m.rank_step_times?.length), [metrics]);
  const latest = withRanks.length ? withRanks[withRanks.length - 1].rank_step_times! : [];
  const slow = stragglers(latest);
  const nRanks = latest.length;
  const series = useMemo(() => Array.from({ length: nRanks }, (_, r) => ({ label: `rank ${r}`, color: PALETTE[r % PALETTE.length], width: 1.5 })), [nRanks]);
  const data = useMemo(
    () => [withRanks.map((m) => m.step), ...Array.from({ length: nRanks }, (_, r) => withRanks.map((m) => (m.rank_step_times?.[r] ?? null) as number | null))],
    [withRanks, nRanks],
  );
  const cap = useMemo(() => robustTop(withRanks.flatMap((m) => m.rank_step_times ?? [])), [withRanks]);
  if (nRanks === 0) return <p className="muted">No per-rank step times reported yet.</p>;
  const max = Math.max(...latest, 1e-9);
  return (
    <div data-testid="rank-times">
      <div className="ranks" aria-label="Newest step time per rank">
        {latest.map((t, r) => (
          <div key={r} className={`rank${slow.has(r) ? ' straggler' : ''}`} title={`rank ${r}: ${(t * 1000).toFixed(1)} ms${slow.has(r) ? ' (straggler)' : ''}`}>
            <span>{(t * 1000).toFixed(0)} ms</span>
            <div className="rank-bar" style={{ height: `${Math.max(4, (t / max) * 60)}px` }} />
            <span>
              r{r}
              {slow.has(r) ? ' slow' : ''}
            </span>
          </div>
        ))}
      </div>
      <Chart series={series} data={data} height={150} time={false} yMin={0} yCap={cap} yFormat={(v) => `${(v * 1000).toFixed(0)} ms`} testId="rank-chart" />
      {cap !== undefined && <p className="field-help">Warm-up steps above {(cap * 1000).toFixed(0)} ms are cut off the chart.</p>}
    </div>
  );
}

/** Utilization of the training's GPUs from the history endpoint, over the run. */
export function RunGpuUtilization({ t }: { t: Training }) {
  const host = t.host_name;
  const gpus = host && t.gpu_ids?.length ? t.gpu_ids : [];
  const running = !t.finished_at;
  const from = t.started_at ?? t.created_at;
  // The key leaves out finished_at: when the run ends the interval stops and
  // the query runs once more over the final range, keeping the curve meanwhile.
  const key = gpus.length ? `run-util|${t.id}|${gpus.join(',')}` : null;
  const q = useQuery(
    key,
    (signal) =>
      endpoints.history({ gpu: gpus.map((g) => `${host}:${g}`), from, to: t.finished_at ?? new Date().toISOString(), points: 300 }, signal),
    running ? 10_000 : undefined,
  );
  const data = useMemo(() => {
    if (!q.data) return [[]];
    // One series per GPU; align them on the union of bucket times.
    const cols = gpus.map((g) => columnsFor({ series: q.data!.series.filter((s) => s.gpu_index === g) }, 'utilization'));
    const xs = [...new Set(cols.flatMap((c) => c[0] as number[]))].sort((a, b) => a - b);
    return [xs, ...cols.map((c) => xs.map((x) => c[1][(c[0] as number[]).indexOf(x)] ?? null))];
  }, [q.data, gpus]);
  if (t.pool) return <p className="muted">Slurm pool {t.pool} reports no GPU utilization for its jobs.</p>;
  if (gpus.length === 0) return <p className="muted">No GPUs assigned yet.</p>;
  if (q.error && !q.data) return <p className="field-error">GPU history unavailable: {q.error.message}</p>;
  if (!q.data) return <p className="muted">Loading GPU history…</p>;
  return (
    <Chart
      series={gpus.map((g, i) => ({ label: `GPU ${g}`, color: PALETTE[i % PALETTE.length] }))}
      data={data as (number | null)[][]}
      height={160}
      yMin={0}
      yMax={100}
      yFormat={(v) => `${Math.round(v)}%`}
      xRange={[Date.parse(from) / 1000, (t.finished_at ? Date.parse(t.finished_at) : Date.now()) / 1000]}
      testId="run-gpu-chart"
    />
  );
}
