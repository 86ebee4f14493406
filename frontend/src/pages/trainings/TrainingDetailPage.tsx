import { useState } from 'react';
import { Link, useParams } from 'react-router-dom';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import type { Training } from '../../api/types';
import { ErrorState, Loading, Pill } from '../../components/States';
import { elapsed, fmtBytes, fmtLoss, num } from '../../lib/format';
import { LossChart, RankTimes, RunGpuUtilization, ScoreChart, scoreKeys, SeriesChart, ThroughputChart, throughputKey } from './TrainingCharts';
import { ResumeButton } from './ResumeButton';
import { TrainingFiles } from './TrainingFiles';
import { TrainingHosts } from './TrainingHosts';
import { EventList, LogTail } from './TrainingLog';
import { gpuText, Progress } from './TrainingsPage';
import { SharingBadges } from './SharingBadges';
import { StartupTable } from './StartupTable';
import { FINAL, useTraining } from './useTraining';
import { QueuePlace } from './QueueView';

function CancelButton({ t, onDone }: { t: Training; onDone: () => void }) {
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  if (FINAL.has(t.status)) return null;
  const cancel = async () => {
    setBusy(true);
    try {
      await endpoints.cancelTraining(t.id);
      setConfirming(false);
      onDone();
    } catch (e) {
      setError((e as ApiError).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="actions">
      {error && <span className="field-error">{error}</span>}
      {confirming ? (
        <>
          <span>Stop every rank of this training?</span>
          <button type="button" className="danger" onClick={cancel} disabled={busy} autoFocus>
            {busy ? 'Cancelling…' : 'Yes, cancel it'}
          </button>
          <button type="button" onClick={() => setConfirming(false)}>
            Keep running
          </button>
        </>
      ) : (
        <button type="button" className="danger" onClick={() => setConfirming(true)}>
          Cancel training
        </button>
      )}
    </div>
  );
}

export function TrainingDetailPage() {
  const { id = '' } = useParams();
  const { training: t, events, metrics, error, refresh } = useTraining(id);
  if (error && !t) return <div className="page">{error.status === 404 ? <ErrorState error={new ApiError(404, `No training with id ${id}.`)} /> : <ErrorState error={error} onRetry={refresh} />}</div>;
  if (!t) return <Loading what="training" />;
  const last = metrics[metrics.length - 1];
  const speed = throughputKey(metrics);
  // A succeeded run needs no explanation; every other state may.
  const reason = t.status === 'succeeded' ? null : (t.status_reason ?? (t.status === 'queued' ? t.wait_reason : null));
  return (
    <div className="page">
      <div className="page-head">
        <h2 data-testid="training-name">{t.name}</h2>
        <span data-testid="training-status">
          <Pill value={t.status} />
          <SharingBadges t={t} />
          <QueuePlace t={t} />
        </span>
        <CancelButton t={t} onDone={refresh} />
        <ResumeButton t={t} onDone={refresh} />
      </div>
      {reason && <div className={`banner ${t.status === 'failed' ? 'banner-error' : 'banner-info'}`}>{reason}</div>}
      {error && <div className="banner banner-error">Refresh failed: {error.message} Showing what was last received.</div>}
      <div className="panel">
        <dl className="kv">
          <div>
            <dt>Progress</dt>
            <dd>
              <Progress t={t} />
            </dd>
          </div>
          <div>
            <dt>Loss</dt>
            <dd data-testid="last-loss">{fmtLoss(last?.loss ?? t.last_loss)}</dd>
          </div>
          <div>
            <dt>{speed === 'tokens_per_s' ? 'Tokens/s' : 'Samples/s'}</dt>
            <dd>{speed && num(last?.metrics?.[speed]) != null ? Math.round(num(last?.metrics?.[speed])!) : '—'}</dd>
          </div>
          <div>
            <dt>GPUs</dt>
            <dd>
              {gpuText(t)}
              {t.distributed ? ` · ${t.world_size} ranks` : ''}
            </dd>
          </div>
          {t.kind === 'script' ? (
            <div>
              <dt>Script</dt>
              <dd data-testid="script-command">
                <code>{(t.argv ?? []).join(' ')}</code>
                {t.code_hash && <span className="muted" title={t.code_hash}> · code {t.code_hash.slice(0, 12)}</span>}
              </dd>
            </div>
          ) : (
            <div>
              <dt>Recipe</dt>
              <dd>{t.recipe}</dd>
            </div>
          )}
          <div>
            <dt>Owner</dt>
            <dd>{t.owner}</dd>
          </div>
          <div>
            <dt>Elapsed</dt>
            <dd>{elapsed(t.started_at, t.finished_at)}</dd>
          </div>
          <div>
            <dt>Memory est. / peak</dt>
            <dd>
              {fmtBytes(t.memory_estimate ?? num(t.estimate?.total))} / {fmtBytes(t.measured_peak_memory)}
            </dd>
          </div>
          <div>
            <dt>Priority</dt>
            <dd data-testid="sharing">
              {t.priority}
              {t.preemptible === false ? ' · not preemptible' : ' · preemptible'}
              {t.max_runtime_s ? ` · max runtime ${t.max_runtime_s}s` : ''}
            </dd>
          </div>
          <div>
            <dt>Restarts</dt>
            <dd>
              {t.restarts ?? 0}
              {t.max_restarts != null ? ` of ${t.max_restarts}` : ''}
            </dd>
          </div>
        </dl>
      </div>
      {t.hosts?.length ? <TrainingHosts t={t} metrics={metrics} /> : null}
      <StartupTable events={events} />
      {FINAL.has(t.status) && metrics.length === 0 ? (
        <div className="charts-grid">
          <div className="panel" data-testid="no-metrics">
            <h3>Metrics</h3>
            <p className="muted">
              No metrics were reported, so there is nothing to chart: the {t.kind === 'script' ? 'script' : 'training'} never called{' '}
              <code>gpufleet.report()</code> (nor wrote TensorBoard scalars into <code>GPUFLEET_OUTPUT_DIR</code>). Its log below shows what it printed.
            </p>
          </div>
          <div className="panel">
            <h3>GPU utilization during the run</h3>
            <RunGpuUtilization t={t} />
          </div>
        </div>
      ) : (
      <div className="charts-grid">
        <div className="panel">
          <h3>Loss</h3>
          {metrics.length ? <LossChart metrics={metrics} /> : <p className="muted">No steps reported yet.</p>}
        </div>
        {scoreKeys(metrics).length > 0 && (
          <div className="panel">
            <h3>Scores</h3>
            <ScoreChart metrics={metrics} />
          </div>
        )}
        <div className="panel">
          <h3>Throughput</h3>
          {metrics.length ? <ThroughputChart metrics={metrics} /> : <p className="muted">No steps reported yet.</p>}
        </div>
        <div className="panel">
          <h3>Other series</h3>
          <SeriesChart metrics={metrics} />
        </div>
        <div className="panel">
          <h3>Step time per rank</h3>
          <RankTimes metrics={metrics} />
        </div>
        <div className="panel">
          <h3>GPU utilization during the run</h3>
          <RunGpuUtilization t={t} />
        </div>
      </div>
      )}
      <div className="charts-grid" style={{ marginTop: '1rem' }}>
        <div className="panel">
          <h3>Events</h3>
          <EventList events={events} />
        </div>
        <div className="panel">
          <h3>Log</h3>
          <LogTail id={t.id} active={!FINAL.has(t.status)} />
        </div>
        <div className="panel">
          <h3>Files</h3>
          <TrainingFiles t={t} active={!FINAL.has(t.status)} />
        </div>
      </div>
      <p>
        <Link to="/trainings">← All trainings</Link>
      </p>
    </div>
  );
}
