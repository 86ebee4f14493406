import { useState } from 'react';
import { endpoints } from '../../api/endpoints';
import type { Group } from '../../api/types';
import { useAction } from '../../api/useAction';
import { useQuery } from '../../api/useQuery';
import { ErrorState } from '../../components/States';
import { BookingLimitInputs, limitValue, Refusal, Section, useBookingLimits } from './parts';

function GroupCard({ g, onChanged }: { g: Group; onChanged: () => void }) {
  const act = useAction(onChanged);
  const [member, setMember] = useState('');
  const [maxGpus, setMaxGpus] = useState(g.quota.max_gpus == null ? '' : String(g.quota.max_gpus));
  const [hours, setHours] = useState(g.quota.gpu_hours_per_week == null ? '' : String(g.quota.gpu_hours_per_week));
  const [cap, setCap] = useState(g.quota.max_priority == null ? '' : String(g.quota.max_priority));
  const bookings = useBookingLimits(g.quota);
  return (
    <div className="group-card" data-testid={`group-${g.name}`}>
      <div className="group-head">
        <b>{g.name}</b>
        <button type="button" className="btn-small" disabled={act.busy} onClick={() => act.run(() => endpoints.deleteGroup(g.name))}
          title="delete the group and its quota; its users stay">
          Delete group
        </button>
      </div>
      <ul className="chips">
        {g.members.map((m) => (
          <li key={m}>
            {m}{' '}
            <button type="button" className="chip-x" aria-label={`remove ${m} from ${g.name}`} disabled={act.busy}
              onClick={() => act.run(() => endpoints.removeGroupMember(g.name, m))}>
              ×
            </button>
          </li>
        ))}
        {g.members.length === 0 && <li className="muted">no members</li>}
      </ul>
      <form className="inline-form" onSubmit={(e) => { e.preventDefault(); void act.run(() => endpoints.addGroupMember(g.name, member.trim())).then((ok) => ok && setMember('')); }}>
        <input aria-label={`add a member to ${g.name}`} value={member} placeholder="user" size={10} onChange={(e) => setMember(e.target.value)} />
        <button type="submit" className="btn-small" disabled={act.busy || !member.trim()}>
          Add member
        </button>
      </form>
      <form className="inline-form" onSubmit={(e) => { e.preventDefault(); void act.run(() => endpoints.setGroupQuota(g.name, { max_gpus: limitValue(maxGpus), gpu_hours_per_week: limitValue(hours), max_priority: limitValue(cap), ...bookings.values() })); }}>
        <label>
          GPUs <input aria-label={`GPU limit of group ${g.name}`} value={maxGpus} placeholder="∞" size={3} onChange={(e) => setMaxGpus(e.target.value)} />
        </label>
        <label>
          GPU-h/week <input aria-label={`GPU-hours per week of group ${g.name}`} value={hours} placeholder="∞" size={4} onChange={(e) => setHours(e.target.value)} />
        </label>
        <label>
          priority cap <input aria-label={`priority cap of group ${g.name}`} value={cap} placeholder="default" size={5} onChange={(e) => setCap(e.target.value)} />
        </label>
        <BookingLimitInputs of={`group ${g.name}`} limits={bookings} blank="no limit" />
        <button type="submit" className="btn-small" disabled={act.busy}>
          Save quota
        </button>
      </form>
      <Refusal error={act.error} />
    </div>
  );
}

export function GroupsSection() {
  const groups = useQuery('team-groups', (s) => endpoints.groups(s));
  const act = useAction(groups.reload);
  const [name, setName] = useState('');
  return (
    <Section title="Groups and quotas" help={<>A group shares one quota: GPUs held at once and GPU-hours over a rolling week. A user's own cap wins over their groups'. Its booking limits count all its members' bookings together.</>}>
      <form className="inline-form" aria-label="Create a group"
        onSubmit={(e) => { e.preventDefault(); void act.run(() => endpoints.createGroup(name.trim())).then((ok) => ok && setName('')); }}>
        <input aria-label="new group name" value={name} placeholder="group, e.g. vision" onChange={(e) => setName(e.target.value)} />
        <button type="submit" className="primary" disabled={act.busy || !name.trim()}>
          Create group
        </button>
      </form>
      <Refusal error={act.error} />
      {groups.error && <ErrorState error={groups.error} onRetry={groups.reload} />}
      {groups.data && groups.data.data.length === 0 && <p className="muted">No groups yet.</p>}
      <div className="group-grid">
        {(groups.data?.data ?? []).map((g) => (
          <GroupCard key={`${g.name}:${JSON.stringify(g.quota)}`} g={g} onChanged={groups.reload} />
        ))}
      </div>
    </Section>
  );
}
