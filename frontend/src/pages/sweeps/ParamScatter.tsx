import type { SweepTrial } from '../../api/types';
import { fmtLoss } from '../../lib/format';
import { scatter } from './sweeps';

const W = 360;
const H = 220;
const PAD = 36;
const LEFT = 56;

/** The metric of each trial against one parameter (a log axis when the values span 50x or more). */
export function ParamScatter({ trials, param, metric, best }: { trials: SweepTrial[]; param: string; metric: string; best: number | null }) {
  const { points, ticks, log } = scatter(trials, param);
  if (points.length === 0) return null;
  const fx = (x: number) => (log ? Math.log10(x) : x);
  const xs = points.map((p) => fx(p.x));
  const ys = points.map((p) => p.y);
  const [x0, x1] = ticks ? [-0.5, ticks.length - 0.5] : [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  const sx = (x: number) => LEFT + ((x - x0) / (x1 - x0 || 1)) * (W - LEFT - PAD);
  const sy = (y: number) => H - PAD - ((y - y0) / (y1 - y0 || 1)) * (H - 2 * PAD);
  return (
    <figure className="scatter" data-testid={`scatter-${param}`}>
      <svg width={W} height={H} role="img" aria-label={`${metric} against ${param}`}>
        <line x1={LEFT} y1={H - PAD} x2={W - PAD} y2={H - PAD} stroke="currentColor" opacity={0.3} />
        <line x1={LEFT} y1={PAD} x2={LEFT} y2={H - PAD} stroke="currentColor" opacity={0.3} />
        {points.map((p) => (
          <circle key={p.number} data-trial={p.number} cx={sx(fx(p.x))} cy={sy(p.y)} r={p.number === best ? 6 : 4}
            fill={p.number === best ? '#16a34a' : p.state === 'pruned' ? '#9ca3af' : '#2563eb'}>
            <title>{`trial ${p.number}: ${param}=${p.label}, ${metric} ${fmtLoss(p.y)} (${p.state})`}</title>
          </circle>
        ))}
        {(ticks ?? [String(points.find((p) => fx(p.x) === x0)?.label), String(points.find((p) => fx(p.x) === x1)?.label)]).map((t, i, all) => (
          <text key={t + i} x={ticks ? sx(i) : i === 0 ? LEFT : W - PAD} y={H - PAD + 16} fontSize={11} fill="currentColor"
            textAnchor={ticks ? 'middle' : i === 0 ? 'start' : all.length > 1 ? 'end' : 'start'}>{t}</text>
        ))}
        <text x={4} y={PAD + 4} fontSize={11} fill="currentColor">{fmtLoss(y1)}</text>
        <text x={4} y={H - PAD} fontSize={11} fill="currentColor">{fmtLoss(y0)}</text>
      </svg>
      <figcaption>
        {metric} against {param}
        {log ? ' (log scale)' : ''}
      </figcaption>
    </figure>
  );
}
