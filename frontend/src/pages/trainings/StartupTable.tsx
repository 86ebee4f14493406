import type { TrainingEvent } from '../../api/types';

const LABELS: Record<string, string> = {
  launcher: 'Launcher',
  imports: 'Interpreter + imports',
  device: 'Device init',
  process_group: 'Process group',
  model: 'Model build',
  first_step: 'First step',
};

type Startup = { phases: string[]; per_rank: number[][] };

/** The newest start-up breakdown among a training's events (the launcher's ``startup`` line), if any. */
export function startupOf(events: TrainingEvent[]): Startup | null {
  for (let i = events.length - 1; i >= 0; i--) {
    const s = events[i].data?.startup as Startup | undefined;
    if (s && Array.isArray(s.phases) && Array.isArray(s.per_rank)) return s;
  }
  return null;
}

/** Where each rank's time from start to its first step went, in seconds: one row per phase. */
export function StartupTable({ events }: { events: TrainingEvent[] }) {
  const s = startupOf(events);
  if (!s) return null;
  const total = s.per_rank.map((r) => r.reduce((a, b) => a + b, 0));
  return (
    <div className="panel" data-testid="startup">
      <h3>Start-up to the first step</h3>
      <table className="table">
        <thead>
          <tr>
            <th>Phase</th>
            {s.per_rank.map((_, r) => (
              <th key={r}>rank {r}</th>
            ))}
          </tr>
        </thead>
        <tbody>
          {s.phases.map((p, i) => (
            <tr key={p} data-testid={`startup-${p}`}>
              <td>{LABELS[p] ?? p}</td>
              {s.per_rank.map((r, k) => (
                <td key={k}>{r[i].toFixed(2)} s</td>
              ))}
            </tr>
          ))}
          <tr data-testid="startup-total">
            <td>
              <strong>Total</strong>
            </td>
            {total.map((t, k) => (
              <td key={k}>
                <strong>{t.toFixed(2)} s</strong>
              </td>
            ))}
          </tr>
        </tbody>
      </table>
    </div>
  );
}
