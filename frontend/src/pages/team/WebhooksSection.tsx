import { useState, type FormEvent } from 'react';
import { endpoints } from '../../api/endpoints';
import type { WebhookCreate, WebhookCreated } from '../../api/types';
import { useAction } from '../../api/useAction';
import { useQuery } from '../../api/useQuery';
import { ErrorState, Pill } from '../../components/States';

const FORMATS: WebhookCreate['format'][] = ['json', 'slack'];

/** Your own webhooks: where gpufleet tells you that your work started, ended, or waits for you. */
export function WebhooksSection({ created, onCreated }: { created: WebhookCreated | null; onCreated: (w: WebhookCreated | null) => void }) {
  const hooks = useQuery('my-webhooks', (s) => endpoints.webhooks(s));
  const act = useAction(hooks.reload);
  const [url, setUrl] = useState('');
  const [format, setFormat] = useState<WebhookCreate['format']>('json');
  const [tested, setTested] = useState<Record<string, string>>({});
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    await act.run(async () => {
      onCreated(await endpoints.createWebhook({ url: url.trim(), format }));
      setUrl('');
    });
  };
  const test = (id: string) =>
    act.run(async () => {
      const r = await endpoints.testWebhook(id);
      setTested((t) => ({ ...t, [id]: r.delivered ? 'delivered' : `not delivered${r.error ? `: ${r.error}` : ''}` }));
    });
  return (
    <section className="panel team-section" aria-label="Your webhooks">
      <h3>Your webhooks</h3>
      <p className="field-help">
        gpufleet posts to these addresses when your trainings and sessions start, end, or go idle. Each person manages only their own.
      </p>
      <form className="inline-form" onSubmit={submit} aria-label="Add a webhook">
        <input aria-label="webhook address" value={url} placeholder="https://hooks.example.org/…" size={40} onChange={(e) => setUrl(e.target.value)} />
        <select aria-label="webhook format" value={format} onChange={(e) => setFormat(e.target.value as WebhookCreate['format'])}>
          {FORMATS.map((f) => (
            <option key={f} value={f}>
              {f}
            </option>
          ))}
        </select>
        <button type="submit" className="primary" disabled={act.busy || !url.trim()}>
          Add webhook
        </button>
      </form>
      {act.error && (
        <div className="banner banner-error" role="alert">
          {act.error}
        </div>
      )}
      {created && (
        <div className="banner banner-ok" role="status">
          Webhook added. Its signing secret, shown once: <code>{created.secret}</code>
        </div>
      )}
      {hooks.error && <ErrorState error={hooks.error} onRetry={hooks.reload} />}
      {hooks.data && hooks.data.data.length > 0 && (
        <table className="table" data-testid="webhooks-table">
          <thead>
            <tr>
              <th>Address</th>
              <th>Format</th>
              <th>Events</th>
              <th>State</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {hooks.data.data.map((h) => (
              <tr key={h.id}>
                <td>
                  <code>{h.url}</code>
                </td>
                <td>{h.format}</td>
                <td>{h.events.join(', ')}</td>
                <td>
                  <Pill value={h.enabled ? 'enabled' : 'disabled'} />
                  {tested[h.id] && <div className="muted">{tested[h.id]}</div>}
                </td>
                <td>
                  <button type="button" className="btn-small" disabled={act.busy} onClick={() => test(h.id)}>
                    Send a test
                  </button>{' '}
                  <button type="button" className="btn-small" disabled={act.busy} onClick={() => act.run(() => endpoints.deleteWebhook(h.id))}>
                    Remove
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
