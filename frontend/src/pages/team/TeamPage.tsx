import { createContext, useContext, useState, type FormEvent } from 'react';
import { endpoints } from '../../api/endpoints';
import type { TeamUser, Token, TokenCreated, UserQuotaPublic, WebhookCreated } from '../../api/types';
import { useAction } from '../../api/useAction';
import { useQuery } from '../../api/useQuery';
import { Empty, ErrorState, Loading, Pill } from '../../components/States';
import { GroupsSection } from './GroupsSection';
import { BookingLimitInputs, limitValue, Refusal, Section, useBookingLimits } from './parts';
import { WebhooksSection } from './WebhooksSection';

const ROLES = ['admin', 'member', 'viewer'] as const;
type Role = (typeof ROLES)[number];

/**
 * Adding or changing users and creating tokens outlast the page, so the server takes them only with a second step
 * beyond the browser's sign-in: the admin's own API token, entered once here, kept in this page's memory only (a
 * reload forgets it) and sent with those requests alone.
 */
const StepToken = createContext('');

function StepTokenField({ value, onChange }: { value: string; onChange: (v: string) => void }) {
  return (
    <p className="field-help" data-testid="second-step">
      <label>
        Your API token, for changes to users and tokens:{' '}
        <input aria-label="your API token for changes to users and tokens" type="password" value={value} size={14}
          placeholder="your API token" onChange={(e) => onChange(e.target.value)} />
      </label>{' '}
      A page you merely opened must not change who may do what, so these changes need it; it stays in this page's memory
      and goes with those requests only.
    </p>
  );
}

/**
 * Map a user to the Unix account their code runs as. The server asks for a second step (the admin's own API
 * token, re-entered here and sent with this one request, never kept), so a page the admin merely opened cannot.
 */
function UnixAccountForm({ u, busy, run }: { u: TeamUser; busy: boolean; run: (fn: () => Promise<unknown>) => Promise<boolean> }) {
  const [unix, setUnix] = useState(u.unix_account ?? '');
  const [token, setToken] = useState('');
  const [force, setForce] = useState(false);
  const changed = unix.trim() !== (u.unix_account ?? '');
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (await run(() => endpoints.setUnixAccount(u.name, unix.trim() || null, token.trim(), force))) setToken('');
  };
  return (
    <form className="inline-form" onSubmit={submit}>
      <input aria-label={`Unix account of ${u.name}`} value={unix} placeholder={`${u.name} (same name)`} size={12}
        onChange={(e) => setUnix(e.target.value)} />
      {changed && (
        <>
          <input aria-label={`your API token to map ${u.name}`} type="password" value={token} size={10} placeholder="your API token"
            title="where a user's code runs needs a second step: your own API token, sent with this request only" onChange={(e) => setToken(e.target.value)} />
          <label title="map even onto an account that belongs to another gpufleet user (recorded)">
            <input type="checkbox" checked={force} onChange={(e) => setForce(e.target.checked)} /> force
          </label>
        </>
      )}
      <button type="submit" className="btn-small" disabled={busy || !changed || !token.trim()}>
        Map
      </button>
    </form>
  );
}

function UserRow({ u, quota, onChanged }: { u: TeamUser; quota?: UserQuotaPublic; onChanged: () => void }) {
  const act = useAction(onChanged);
  const step = useContext(StepToken);
  const [cap, setCap] = useState(quota?.max_priority == null ? '' : String(quota.max_priority));
  const [maxGpus, setMaxGpus] = useState(quota?.max_gpus == null ? '' : String(quota.max_gpus));
  const [hours, setHours] = useState(quota?.gpu_hours_per_week == null ? '' : String(quota.gpu_hours_per_week));
  const bookings = useBookingLimits(quota);
  const saveQuota = () =>
    act.run(() =>
      endpoints.setUserQuota(u.name, {
        max_gpus: limitValue(maxGpus),
        gpu_hours_per_week: limitValue(hours),
        max_priority: limitValue(cap),
        share: quota?.share ?? 1,
        ...bookings.values(),
      }),
    );
  return (
    <>
      <tr data-testid={`user-${u.name}`}>
        <td>
          <b>{u.name}</b>
          {u.groups.length > 0 && <div className="muted">{u.groups.join(', ')}</div>}
        </td>
        <td>
          <select aria-label={`role of ${u.name}`} value={u.role} disabled={act.busy}
            onChange={(e) => act.run(() => endpoints.updateUser(u.name, { role: e.target.value as Role }, step))}>
            {ROLES.map((r) => (
              <option key={r} value={r}>
                {r}
              </option>
            ))}
          </select>
        </td>
        <td>
          <Pill value={u.disabled ? 'disabled' : 'active'} />{' '}
          <button type="button" className="btn-small" disabled={act.busy}
            onClick={() => act.run(() => endpoints.updateUser(u.name, { disabled: !u.disabled }, step))}>
            {u.disabled ? 'Enable' : 'Disable'}
          </button>
        </td>
        <td>
          <label title="run their own code: script trainings and sessions">
            <input type="checkbox" checked={u.run_code || u.role === 'admin'} disabled={act.busy || u.role === 'admin'}
              onChange={(e) => act.run(() => endpoints.updateUser(u.name, { run_code: e.target.checked }, step))} /> run code
          </label>{' '}
          <label title="ask for trainings no higher-priority one can preempt">
            <input type="checkbox" checked={u.non_preemptible || u.role === 'admin'} disabled={act.busy || u.role === 'admin'}
              onChange={(e) => act.run(() => endpoints.updateUser(u.name, { non_preemptible: e.target.checked }, step))} /> non-preemptible
          </label>
        </td>
        <td>
          <UnixAccountForm u={u} busy={act.busy} run={act.run} />
        </td>
        <td>
          <form className="inline-form" onSubmit={(e) => { e.preventDefault(); void saveQuota(); }}>
            <input aria-label={`GPU limit of ${u.name}`} value={maxGpus} placeholder="∞" size={3} inputMode="numeric"
              onChange={(e) => setMaxGpus(e.target.value)} title="GPUs held at once; blank: no limit" />
            <input aria-label={`GPU-hours per week of ${u.name}`} value={hours} placeholder="∞" size={4} inputMode="decimal"
              onChange={(e) => setHours(e.target.value)} title="GPU-hours over a rolling 7 days; blank: no limit" />
            <input aria-label={`priority cap of ${u.name}`} value={cap} placeholder="default" size={5} inputMode="numeric"
              onChange={(e) => setCap(e.target.value)} title="the highest priority they may give a training; blank: the server's default" />
            <BookingLimitInputs of={u.name} limits={bookings} blank="the server's default" />
            <button type="submit" className="btn-small" disabled={act.busy}>
              Save
            </button>
          </form>
        </td>
        <td className="num">{u.live_tokens}</td>
      </tr>
      {act.error && (
        <tr>
          <td colSpan={7}>
            <Refusal error={act.error} />
          </td>
        </tr>
      )}
    </>
  );
}

function UsersSection() {
  const users = useQuery('team-users', (s) => endpoints.users(s));
  const quotas = useQuery('team-quotas', (s) => endpoints.quotas(s));
  const reload = () => {
    users.reload();
    quotas.reload();
  };
  const add = useAction(reload);
  const step = useContext(StepToken);
  const [name, setName] = useState('');
  const [role, setRole] = useState<Role>('member');
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (await add.run(() => endpoints.createUser({ name: name.trim(), role }, step))) setName('');
  };
  const byUser = new Map((quotas.data?.data ?? []).map((q) => [q.user, q]));
  return (
    <Section title="Users" help={<>Who may do what. Members run work, viewers only read; admins do everything. A user's work runs as their Unix account (the same name, unless mapped). Limits left blank are no limit.</>}>
      <form className="inline-form" onSubmit={submit} aria-label="Add a user">
        <input aria-label="new user name" value={name} placeholder="name, e.g. alice" onChange={(e) => setName(e.target.value)} />
        <select aria-label="new user role" value={role} onChange={(e) => setRole(e.target.value as Role)}>
          {ROLES.map((r) => (
            <option key={r} value={r}>
              {r}
            </option>
          ))}
        </select>
        <button type="submit" className="primary" disabled={add.busy || !name.trim()}>
          Add user
        </button>
      </form>
      <Refusal error={add.error} />
      {users.error && <ErrorState error={users.error} onRetry={reload} />}
      {!users.data && !users.error && <Loading what="users" />}
      {users.data && users.data.data.length === 0 && <Empty title="No users yet." />}
      {users.data && users.data.data.length > 0 && (
        <table className="table" data-testid="users-table">
          <thead>
            <tr>
              <th>User</th>
              <th>Role</th>
              <th>State</th>
              <th>Permissions</th>
              <th>Unix account</th>
              <th title="GPUs at once · GPU-hours a week · priority cap; then what their bookings may hold (blank: the server's default)">Limits (GPUs · GPU-h/week · priority cap) and bookings</th>
              <th>Tokens</th>
            </tr>
          </thead>
          <tbody>
            {users.data.data.map((u) => (
              <UserRow key={`${u.name}:${byUser.get(u.name)?.max_priority ?? ''}:${byUser.get(u.name)?.max_gpus ?? ''}`} u={u}
                quota={byUser.get(u.name)} onChanged={reload} />
            ))}
          </tbody>
        </table>
      )}
    </Section>
  );
}

function fmtDate(s: string | null | undefined): string {
  return s ? new Date(s).toLocaleDateString() : '–';
}

function TokensSection() {
  const tokens = useQuery('team-tokens', (s) => endpoints.tokens(s));
  const act = useAction(tokens.reload);
  const [user, setUser] = useState('');
  const [label, setLabel] = useState('');
  const [days, setDays] = useState('');
  const [made, setMade] = useState<TokenCreated | null>(null);
  const step = useContext(StepToken);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    await act.run(async () => {
      const t = await endpoints.createToken({ user: user.trim(), name: label.trim() || 'default', expires_days: limitValue(days) }, step);
      setMade(t);
    });
  };
  const state = (t: Token) => (t.revoked_at ? 'revoked' : t.expires_at && new Date(t.expires_at) < new Date() ? 'expired' : 'live');
  return (
    <Section title="API tokens" help={<>A token signs a person (or a script, or CI) in as a user. Its secret is shown once, when it is made; only its first characters are kept to recognise it.</>}>
      <form className="inline-form" onSubmit={submit} aria-label="Create a token">
        <input aria-label="token user" value={user} placeholder="user" onChange={(e) => setUser(e.target.value)} />
        <input aria-label="token label" value={label} placeholder="label, e.g. laptop" onChange={(e) => setLabel(e.target.value)} />
        <input aria-label="token expires in days" value={days} placeholder="never expires" size={10} inputMode="numeric"
          onChange={(e) => setDays(e.target.value)} />
        <button type="submit" className="primary" disabled={act.busy || !user.trim()}>
          Create token
        </button>
      </form>
      <Refusal error={act.error} />
      {made && (
        <div className="banner banner-ok" role="status" data-testid="token-secret">
          Token for <b>{made.user}</b> ({made.name}). Store it now, it is not shown again: <code>{made.secret}</code>
        </div>
      )}
      {tokens.error && <ErrorState error={tokens.error} onRetry={tokens.reload} />}
      {tokens.data && (
        <table className="table" data-testid="tokens-table">
          <thead>
            <tr>
              <th>Prefix</th>
              <th>User</th>
              <th>Label</th>
              <th>Created</th>
              <th>Expires</th>
              <th>Last used</th>
              <th>State</th>
            </tr>
          </thead>
          <tbody>
            {tokens.data.data.map((t) => (
              <tr key={t.id}>
                <td>
                  <code>{t.prefix}…</code>
                </td>
                <td>{t.user}</td>
                <td>{t.name}</td>
                <td>{fmtDate(t.created_at)}</td>
                <td>{fmtDate(t.expires_at)}</td>
                <td>{fmtDate(t.last_used_at)}</td>
                <td>
                  <Pill value={state(t)} />{' '}
                  {state(t) === 'live' && (
                    <button type="button" className="btn-small" disabled={act.busy} onClick={() => act.run(() => endpoints.revokeToken(t.id))}>
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Section>
  );
}

/** The admin area: the team's users, roles, tokens, groups, quotas, priority caps, Unix accounts, and your webhooks. */
export function TeamPage() {
  const me = useQuery('whoami', (s) => endpoints.whoami(s));
  const [created, setCreated] = useState<WebhookCreated | null>(null);
  const [step, setStep] = useState('');
  if (me.error) return <div className="page"><ErrorState error={me.error} onRetry={me.reload} /></div>;
  if (!me.data) return <div className="page"><Loading what="who you are" /></div>;
  const admin = me.data.role === 'admin';
  return (
    <div className="page">
      <div className="page-head">
        <h2>Team</h2>
      </div>
      {!admin && (
        <p className="field-help" data-testid="team-not-admin">
          Only admins manage users, tokens, groups and quotas; ask one of your team's admins. You can manage your own webhooks below.
        </p>
      )}
      {admin && <StepTokenField value={step} onChange={setStep} />}
      <StepToken.Provider value={step.trim()}>
        {admin && <UsersSection />}
        {admin && <TokensSection />}
      </StepToken.Provider>
      {admin && <GroupsSection />}
      <WebhooksSection created={created} onCreated={setCreated} />
    </div>
  );
}
