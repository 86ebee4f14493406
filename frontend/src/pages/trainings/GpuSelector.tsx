import type { Candidate, GPU, ValidationProblem } from '../../api/types';
import { Bar } from '../../components/Bar';
import { Pill } from '../../components/States';
import { fmtBytes } from '../../lib/format';

export interface Selection {
  host: string | null;
  indexes: number[];
}

const USABLE = new Set(['free', 'shared']);

/** Free memory as gpufleet may give it: the availability figure, else the device's own. */
export function freeOf(g: GPU): number | null {
  return g.availability?.free_memory ?? g.live?.memory_free ?? null;
}

/**
 * What the bar says: the memory really free on the device, and apart from it
 * what other trainings' reservations hold (a reserved GPU is not "0 KiB free").
 */
export function memoryText(g: GPU): string {
  const total = g.live?.memory_total ?? g.memory_total ?? null;
  const device = g.live?.memory_free ?? (total != null && g.live?.memory_used != null ? total - g.live.memory_used : null);
  const schedulable = g.availability?.free_memory ?? null;
  const free = device ?? schedulable;
  let text = `${fmtBytes(free)} free of ${fmtBytes(total)}`;
  if (device != null && schedulable != null && schedulable < device) {
    text += schedulable === 0 ? ' · all reserved' : ` · ${fmtBytes(schedulable)} not reserved`;
  }
  return text;
}

export function GpuSelector({
  gpus,
  selection,
  onChange,
  needBytes,
  recommended,
  problems,
  warnings,
}: {
  gpus: GPU[];
  selection: Selection;
  onChange: (s: Selection) => void;
  /** Memory one rank needs (the estimate), bytes. */
  needBytes: number | null;
  recommended: Candidate | null;
  problems: ValidationProblem[];
  warnings: ValidationProblem[];
}) {
  const toggle = (g: GPU) => {
    // One training runs on one host: picking a GPU elsewhere starts a new selection.
    if (selection.host !== g.host) return onChange({ host: g.host, indexes: [g.index] });
    const has = selection.indexes.includes(g.index);
    const indexes = has ? selection.indexes.filter((i) => i !== g.index) : [...selection.indexes, g.index].sort((a, b) => a - b);
    onChange({ host: indexes.length ? g.host : null, indexes });
  };
  const perGpu = (g: GPU, list: ValidationProblem[]) => (selection.host === g.host ? list.filter((p) => p.gpu_index === g.index) : []);
  const general = [...problems, ...warnings].filter((p) => p.gpu_index == null);

  if (gpus.length === 0) return <p className="muted">No GPUs are registered; the training will wait until a host with GPUs joins.</p>;
  return (
    <div className="gpu-selector" role="group" aria-label="GPUs for this training">
      {gpus.map((g) => {
        const id = `sel-${g.host}-${g.index}`;
        const checked = selection.host === g.host && selection.indexes.includes(g.index);
        const total = g.live?.memory_total ?? g.memory_total ?? 0;
        const used = g.live?.memory_used ?? (total && freeOf(g) != null ? total - (freeOf(g) ?? 0) : null);
        const free = freeOf(g);
        const state = g.availability?.state ?? 'unknown';
        const fits = needBytes == null || free == null ? null : free >= needBytes;
        const isRec = recommended?.host === g.host && recommended.gpu_indexes.includes(g.index);
        const mine = [...perGpu(g, problems), ...perGpu(g, warnings)];
        return (
          <div key={id} className={`selector-row${USABLE.has(state) ? '' : ' unusable'}`} data-testid={id}>
            <input id={id} type="checkbox" checked={checked} onChange={() => toggle(g)} aria-describedby={`${id}-desc`} />
            <label htmlFor={id}>
              <b>
                {g.host} · GPU {g.index}
              </b>
              <div className="muted" style={{ fontSize: '0.8rem' }}>
                {g.name}
                {isRec && <span style={{ color: 'var(--violet)' }}> · recommended</span>}
              </div>
            </label>
            <Pill value={state} title={g.availability?.reason} />
            <div id={`${id}-desc`}>
              <Bar
                label={g.availability?.reason ?? 'Memory'}
                value={used}
                max={total}
                text={memoryText(g)}
                marker={needBytes != null && used != null ? used + needBytes : null}
                markerLabel={needBytes != null ? `this training needs ${fmtBytes(needBytes)} per GPU` : undefined}
                tone={fits === false ? 'bad' : undefined}
              />
              {fits === false && <div className="field-error">needs {fmtBytes(needBytes)}; short by {fmtBytes((needBytes ?? 0) - (free ?? 0))}</div>}
              {mine.map((p, i) => (
                <div key={i} className={problems.includes(p) ? 'field-error' : 'field-help'}>
                  {p.message}
                </div>
              ))}
            </div>
          </div>
        );
      })}
      {general.length > 0 && (
        <ul className="problems" aria-label="Selection problems">
          {general.map((p, i) => (
            <li key={i} className={problems.includes(p) ? 'problem-error' : 'problem-warning'}>
              {p.message}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
