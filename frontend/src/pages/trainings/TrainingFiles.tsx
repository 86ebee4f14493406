import { useState } from 'react';
import { download } from '../../api/client';
import { endpoints, listOf, trainingFileUrl } from '../../api/endpoints';
import type { Training } from '../../api/types';
import { useQuery } from '../../api/useQuery';
import { fmtBytes } from '../../lib/format';

/**
 * The training's checkpoints and outputs, each a download link (its owner and admins may read them). A click
 * asks for a single-use download link (a navigation carries no page key) and opens it.
 */
export function TrainingFiles({ t, active }: { t: Training; active: boolean }) {
  const [failed, setFailed] = useState<string | null>(null);
  const q = useQuery(`files|${t.id}`, (signal) => endpoints.trainingFiles(t.id, signal), active ? 15_000 : undefined);
  if (q.error && !q.data) {
    const text = q.error.status === 403 ? 'Only its owner and admins see its files.' : `Files unavailable: ${q.error.message}`;
    return <p className="muted">{text}</p>;
  }
  if (!q.data) return <p className="muted">Loading files…</p>;
  const files = listOf(q.data);
  if (files.length === 0) return <p className="muted">No checkpoints or outputs yet.</p>;
  return (
    <>
    {failed && <p className="error" role="alert">Download failed: {failed}</p>}
    <table className="table" data-testid="training-files">
      <thead>
        <tr>
          <th scope="col">File</th>
          <th scope="col">Size</th>
          <th scope="col">Modified</th>
        </tr>
      </thead>
      <tbody>
        {files.map((f) => (
          <tr key={f.path}>
            <td>
              <a
                href={trainingFileUrl(t.id, f.path)}
                download
                onClick={(ev) => {
                  ev.preventDefault();
                  setFailed(null);
                  download(trainingFileUrl(t.id, f.path)).catch((err: Error) => setFailed(`${f.path}: ${err.message}`));
                }}
              >
                {f.path}
              </a>
            </td>
            <td>{fmtBytes(f.size)}</td>
            <td className="muted">{new Date(f.modified).toLocaleString()}</td>
          </tr>
        ))}
      </tbody>
    </table>
    </>
  );
}
