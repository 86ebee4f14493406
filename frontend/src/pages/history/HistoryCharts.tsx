import type { HistoryResponse } from '../../api/types';
import { Chart } from '../../components/Chart';
import { byteUnit, columnsFor, maxOf } from './history';
import type { HistoryMetric } from '../../api/endpoints';

const CHARTS: { metric: HistoryMetric; title: string; yMin?: number; yMax?: number; bytes?: boolean; fmt: (v: number) => string }[] = [
  { metric: 'utilization', title: 'Utilization', yMin: 0, yMax: 100, fmt: (v) => `${Math.round(v)}%` },
  // Bytes are drawn in one binary unit chosen for the data, so the ticks are round numbers of it.
  { metric: 'memory_used', title: 'Memory used', yMin: 0, bytes: true, fmt: (v) => `${Math.round(v)}` },
  { metric: 'temperature', title: 'Temperature', fmt: (v) => `${Math.round(v)}°C` },
  { metric: 'power_draw', title: 'Power', yMin: 0, fmt: (v) => `${Math.round(v)} W` },
];
const SERIES = [
  { label: 'avg', color: '#4fb3ff' },
  { label: 'min', color: '#4fb3ff66', width: 1 },
  { label: 'max', color: '#f5b94599', width: 1 },
];

/** The four history charts (utilization, memory, temperature, power) of one answer of the history endpoint. */
export function HistoryCharts({ data: answer }: { data: HistoryResponse }) {
  const xRange: [number, number] = [Date.parse(answer.start) / 1000, Date.parse(answer.end) / 1000];
  return (
    <div className="charts-grid" data-testid="history-charts">
      {CHARTS.map((c) => {
        let data = columnsFor(answer, c.metric);
        let fmt = c.fmt;
        let unit: string | undefined;
        if (c.bytes) {
          const u = byteUnit(maxOf(data));
          data = columnsFor(answer, c.metric, 1 / u.div);
          unit = u.label;
          fmt = (v) => `${v.toFixed(v >= 100 ? 0 : 1)} ${u.label}`;
        }
        return (
          <div className="panel" key={c.metric}>
            <h3>{c.title}</h3>
            <Chart
              series={SERIES}
              data={data}
              height={200}
              yFormat={fmt}
              yUnit={unit}
              yMin={c.yMin}
              yMax={c.yMax}
              xRange={xRange}
              testId={`history-${c.metric}`}
            />
          </div>
        );
      })}
    </div>
  );
}
