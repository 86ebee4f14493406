import { useEffect, useMemo, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { breaks, ownPointsOnly, withGaps, type Column } from './chartGaps';

export interface SeriesSpec {
  label: string;
  color: string;
  /** Fill under the line (mini charts). */
  fill?: boolean;
  width?: number;
  /** uPlot's dash pattern (drawn, gap, ... in pixels); solid when left out. */
  dash?: number[];
}

export interface ChartProps {
  series: SeriesSpec[];
  /**
   * [x (seconds since epoch, or steps), ...one column per series]. Over time a null is a hole in the line;
   * over steps a series is drawn through its own points only (a null there is a step it has no point at).
   */
  data: Column[];
  height: number;
  /** Mini chart: no axes, no legend, no cursor. */
  mini?: boolean;
  /** x is time (seconds) rather than a plain number such as a step. */
  time?: boolean;
  yMin?: number;
  yMax?: number;
  yFormat?: (v: number) => string;
  /**
   * The y axis's one unit (e.g. "GiB"): ticks are uPlot's round splits of the
   * values, each written as "<number> <unit>"; the legend still uses yFormat.
   */
  yUnit?: string;
  title?: string;
  testId?: string;
  /** Live charts: always show this many seconds ending at the newest point. */
  windowSec?: number;
  /** A fixed x range (e.g. the requested time range of a history chart). */
  xRange?: [number, number];
  /** A fixed top for y, even when some points are higher (outliers drawn clipped). */
  yCap?: number;
}

/**
 * Short time labels: hh:mm(:ss) within a day, then the date. uPlot's default
 * stacks a date under the first label, which collides with its neighbour.
 */
function timeLabels(u: uPlot, splits: number[]): string[] {
  const span = (u.scales.x.max ?? 0) - (u.scales.x.min ?? 0);
  return splits.map((s) => {
    const d = new Date(s * 1000);
    if (span > 2 * 86400) return d.toLocaleDateString([], { month: 'short', day: 'numeric' });
    if (span > 600) return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hour12: false });
    return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
  });
}

/** A y tick: uPlot's round split with its unit, or the chart's own format. */
export function tickLabel(v: number, unit: string | undefined, fmt: ((v: number) => string) | undefined): string {
  if (unit !== undefined) return `${Number(v.toPrecision(6))} ${unit}`;
  return fmt ? fmt(v) : String(Number(v.toPrecision(6)));
}

/** Step labels: whole steps only (a step has no half); uPlot is also asked for whole increments. */
export function stepLabels(splits: number[]): string[] {
  return splits.map((v) => (v != null && Number.isInteger(v) ? String(v) : ''));
}

const STEP_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500].flatMap((n) => [n, n * 1e3, n * 1e6]).sort((a, b) => a - b);

/** Pixels for the y axis: its longest label at the axis font (about 7 px a character) plus the ticks. */
export function axisWidth(values: string[] | null): number {
  const longest = Math.max(3, ...(values ?? []).map((v) => v.length));
  return Math.ceil(longest * 7.2 + 20);
}

const AXIS = { stroke: '#8b98a9', grid: { stroke: '#232b35', width: 1 }, ticks: { stroke: '#232b35', width: 1 } };

/**
 * A uPlot canvas chart. uPlot draws 64 one-second series with a few hundred
 * points each in well under a frame (bench/dashboard_charts.py), which is why
 * the dashboard uses it instead of an SVG chart library.
 */
export function Chart({ series, data: given, height, mini, time = true, yMin, yMax, yFormat, yUnit, title, testId, windowSec, xRange, yCap }: ChartProps) {
  // Over time, a stretch without samples (a server down) is drawn as a hole; over steps, each series
  // joins its own points (one trial's curve never breaks where another has a point it lacks).
  const data = useMemo(() => (time ? withGaps(given) : ownPointsOnly(given)), [given, time]);
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const dataRef = useRef(data);
  dataRef.current = data;
  const seriesKey = series.map((s) => `${s.label}:${s.color}:${s.dash ?? ''}`).join('|');

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const width = Math.max(el.clientWidth, 120);
    const opts: uPlot.Options = {
      width,
      height,
      title,
      legend: { show: !mini },
      cursor: mini ? { show: false } : { drag: { x: true, y: false } },
      scales: {
        // A fixed window keeps a fresh live chart from zooming into milliseconds.
        x: xRange
          ? { time, range: () => [xRange[0], xRange[1]] }
          : windowSec
            ? { time, range: (_u, _lo, hi) => [hi - windowSec, hi] }
            : { time },
        // Mini charts get a little headroom so a line at 0% or 100% stays visible.
        y: yCap !== undefined
          ? { range: () => [yMin ?? 0, yCap] }
          : yMin !== undefined || yMax !== undefined
            ? {
                range: (_u, lo, hi) => {
                  const bottom = (yMin ?? lo) - (mini ? 3 : 0);
                  // Without a fixed top, leave 8% headroom so the highest point is not cut.
                  const top = yMax !== undefined ? Math.max(yMax, hi) + (mini ? 3 : 0) : hi + Math.max((hi - bottom) * 0.08, 1e-9);
                  return [bottom, top];
                },
              }
            : {},
      },
      axes: mini
        ? [{ show: false }, { show: false }]
        : [
            time ? { ...AXIS, space: 70, values: timeLabels } : { ...AXIS, incrs: STEP_INCRS, values: (_u: uPlot, splits: number[]) => stepLabels(splits) },
            {
              ...AXIS,
              // Wide enough for the longest label, so none is clipped on the left.
              size: (_u: uPlot, values: string[] | null) => axisWidth(values),
              values: (_u: uPlot, vals: number[]) => vals.map((v) => (v == null ? '' : tickLabel(v, yUnit, yFormat))),
            },
          ],
      series: [
        { label: time ? 'time' : 'step' },
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: s.width ?? (mini ? 1.5 : 2),
          dash: s.dash,
          fill: s.fill ? `${s.color}33` : undefined,
          // Dots only where data is sparse (uPlot decides), never on mini charts.
          points: mini ? { show: false } : {},
          value: yFormat ? (_u: uPlot, v: number | null) => (v == null ? '—' : yFormat(v)) : undefined,
        })),
      ],
    };
    const u = new uPlot(opts, dataRef.current as uPlot.AlignedData, el);
    plot.current = u;
    const ro = typeof ResizeObserver !== 'undefined' ? new ResizeObserver(() => u.setSize({ width: Math.max(el.clientWidth, 120), height })) : null;
    ro?.observe(el);
    return () => {
      ro?.disconnect();
      u.destroy();
      plot.current = null;
    };
    // Rebuilt only when the chart's shape changes; new data goes through setData below.
  }, [seriesKey, height, mini, time, yMin, yMax, yUnit, title, windowSec, xRange?.[0], xRange?.[1], yCap]);

  useEffect(() => {
    plot.current?.setData(data as uPlot.AlignedData);
  }, [data]);

  const points = given[0]?.length ?? 0;
  const gaps = (data[0]?.length ?? 0) - points;
  return <div ref={box} className={mini ? 'chart chart-mini' : 'chart'} data-testid={testId} data-points={points} data-gaps={gaps} data-breaks={breaks(data)} data-series={series.map((s) => s.label).join('|')} />;
}
