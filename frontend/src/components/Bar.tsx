/** A horizontal meter: utilization or memory, with an optional marker (e.g. a memory need). */
export function Bar({
  value,
  max = 100,
  label,
  text,
  marker,
  markerLabel,
  tone,
}: {
  value: number | null | undefined;
  max?: number;
  label: string;
  text: string;
  marker?: number | null;
  markerLabel?: string;
  tone?: 'ok' | 'warn' | 'bad';
}) {
  const frac = value == null || !max ? 0 : Math.min(1, Math.max(0, value / max));
  const auto = frac > 0.9 ? 'bad' : frac > 0.7 ? 'warn' : 'ok';
  const markerFrac = marker == null || !max ? null : Math.min(1, Math.max(0, marker / max));
  return (
    <div className="bar" role="meter" aria-label={label} aria-valuemin={0} aria-valuemax={max} aria-valuenow={value ?? undefined} aria-valuetext={text}>
      <div className="bar-head">
        <span className="bar-label">{label}</span>
        <span className="bar-text">{text}</span>
      </div>
      <div className="bar-track">
        <div className={`bar-fill tone-${tone ?? auto}`} style={{ width: `${(frac * 100).toFixed(1)}%` }} />
        {markerFrac != null && <div className="bar-marker" style={{ left: `${(markerFrac * 100).toFixed(1)}%` }} title={markerLabel} />}
      </div>
    </div>
  );
}
