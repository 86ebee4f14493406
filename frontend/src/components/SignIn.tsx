import { useEffect, useState, type FormEvent } from 'react';
import { ApiError, onAuthRequired, signIn } from '../api/client';

/** Shown when the server answers 401: sign in with an API token, then reload. */
export function SignIn({ onSignedIn = () => window.location.reload() }: { onSignedIn?: () => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (!token.trim()) return setError('Paste an API token first.');
    setBusy(true);
    try {
      await signIn(token.trim());
      onSignedIn();
    } catch (err) {
      setError((err as ApiError).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="panel signin" role="dialog" aria-labelledby="signin-title">
      <h2 id="signin-title">Sign in</h2>
      <p className="muted">
        This server needs a sign-in. On the server&apos;s machine, run <code>gpufleet open</code> and follow the link it prints; or paste an
        API token (an admin creates one with <code>gpufleet tokens create</code>). The browser keeps an HTTP-only session cookie, not the token.
      </p>
      <form onSubmit={submit}>
        <label htmlFor="signin-token" className="muted" style={{ alignSelf: 'center' }}>
          Token
        </label>
        <input id="signin-token" type="password" autoComplete="off" value={token} onChange={(e) => setToken(e.target.value)} autoFocus />
        <button type="submit" className="primary" disabled={busy}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
      </form>
      {error && (
        <p className="field-error" role="alert">
          {error}
        </p>
      )}
    </div>
  );
}

/** True once any request has been refused with 401. */
export function useAuthRequired(): boolean {
  const [required, setRequired] = useState(false);
  useEffect(() => onAuthRequired(() => setRequired(true)), []);
  return required;
}
