import { useState } from 'react';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import { FINAL_STATUSES, type Training } from '../../api/types';

/** Ended trainings that can continue from their newest checkpoint. */
export const RESUMABLE = FINAL_STATUSES;

/** "Resume": the same training goes back to the queue and continues from its newest checkpoint. */
export function ResumeButton({ t, onDone }: { t: Training; onDone: () => void }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  if (!RESUMABLE.has(t.status)) return null;
  const resume = async () => {
    setBusy(true);
    setError(null);
    try {
      await endpoints.resumeTraining(t.id);
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
      <button type="button" onClick={resume} disabled={busy} title="Continue from its newest checkpoint">
        {busy ? 'Resuming…' : 'Resume'}
      </button>
    </div>
  );
}
