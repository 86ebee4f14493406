import { colorOf, fmtHours, type UsageGrid } from './usage';

const W = 720;
const H = 220;
const PAD = { left: 44, right: 8, top: 8, bottom: 24 };

/** The smallest 1, 2 or 5 × 10^k at or above ``v``, so the axis reads in round numbers. */
export function niceTop(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return ([1, 2, 5, 10].find((m) => m * p >= v) ?? 10) * p;
}

/** One bar per day, a segment per user (or group), stacked; drawn as SVG, so it needs no chart library. */
export function UsageChart({ grid, unit }: { grid: UsageGrid; unit: string }) {
  const max = Math.max(...grid.totals, 0);
  const top = niceTop(max);
  const innerW = W - PAD.left - PAD.right;
  const innerH = H - PAD.top - PAD.bottom;
  const slot = innerW / Math.max(grid.days.length, 1);
  const barW = Math.max(2, Math.min(40, slot * 0.7));
  const y = (v: number) => PAD.top + innerH - (v / top) * innerH;
  const labelEvery = Math.ceil(grid.days.length / 10);
  return (
    <figure className="usage-chart" data-testid="usage-chart">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={`${unit} per day, stacked by ${grid.names.length} names`}>
        {[0, 0.5, 1].map((f) => (
          <g key={f}>
            <line x1={PAD.left} x2={W - PAD.right} y1={y(top * f)} y2={y(top * f)} className="usage-grid" />
            <text x={PAD.left - 4} y={y(top * f) + 4} textAnchor="end" className="usage-tick">
              {fmtHours(top * f)}
            </text>
          </g>
        ))}
        {grid.days.map((day, i) => {
          let base = 0;
          const x = PAD.left + i * slot + (slot - barW) / 2;
          return (
            <g key={day} data-day={day}>
              {grid.names.map((name, k) => {
                const v = grid.hours[name][i];
                if (v <= 0) return null;
                const y0 = y(base);
                base += v;
                return (
                  <rect key={name} x={x} width={barW} y={y(base)} height={y0 - y(base)} fill={colorOf(k)} data-name={name}
                        data-hours={v}>
                    <title>{`${day} · ${name}: ${fmtHours(v)} ${unit}`}</title>
                  </rect>
                );
              })}
              {i % labelEvery === 0 && (
                <text x={x + barW / 2} y={H - 6} textAnchor="middle" className="usage-tick">
                  {day.slice(5)}
                </text>
              )}
            </g>
          );
        })}
      </svg>
      <figcaption className="usage-legend">
        {grid.names.map((name, k) => (
          <span key={name}>
            <span className="usage-swatch" style={{ background: colorOf(k) }} aria-hidden /> {name}
          </span>
        ))}
      </figcaption>
    </figure>
  );
}
