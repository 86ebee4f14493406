import { endpoints } from '../../api/endpoints';
import type { Pool, PoolNode } from '../../api/types';
import { useQuery } from '../../api/useQuery';
import { fmtBytes } from '../../lib/format';

/**
 * GPUs in a Slurm GRES string as sinfo prints it: `gpu:4`, `gpu:h100:4(S:0-1)`,
 * `gpu:a100:2(IDX:0,3),gpu:h100:1(IDX:0)`; other resources (`shard:8`) are not GPUs.
 */
export function gresGpus(gres: string): number {
  let total = 0;
  // Commas inside parentheses (IDX:0,3) belong to their entry.
  for (const entry of gres.split(/,(?![^(]*\))/)) {
    const name = entry.replace(/\(.*\)$/, '').trim();
    const parts = name.split(':');
    if (parts[0] !== 'gpu' || parts.length < 2) continue;
    const n = Number(parts[parts.length - 1]);
    if (Number.isInteger(n) && n >= 0) total += n;
  }
  return total;
}

function nodeRow(n: PoolNode) {
  return (
    <tr key={n.name} data-testid={`pool-node-${n.name}`}>
      <td>{n.name}</td>
      <td>{n.state}</td>
      <td>
        {gresGpus(n.gres_used)} of {gresGpus(n.gres)}
      </td>
      <td title="allocated/idle/other/total">{n.cpus}</td>
    </tr>
  );
}

function PoolGroup({ pool }: { pool: Pool }) {
  const nodes = pool.nodes ?? [];
  const used = nodes.reduce((s, n) => s + gresGpus(n.gres_used), 0);
  const total = nodes.reduce((s, n) => s + gresGpus(n.gres), 0);
  const model = [pool.gpu_model, pool.gpu_memory ? fmtBytes(pool.gpu_memory) : null].filter(Boolean).join(', ');
  return (
    <section className="host-group" aria-label={`Pool ${pool.name}`}>
      <h3 className="host-title">
        {pool.name}{' '}
        <span className="muted">
          · Slurm partition {pool.partition}
          {model && ` · ${model}`}
          {pool.nodes && ` · ${used} of ${total} GPU${total === 1 ? '' : 's'} in use on ${nodes.length} node${nodes.length === 1 ? '' : 's'}`}
        </span>
      </h3>
      {pool.error ? (
        <div className="banner banner-error">Slurm did not answer: {pool.error}</div>
      ) : (
        <table className="table">
          <thead>
            <tr>
              <th>Node</th>
              <th>State</th>
              <th>GPUs in use</th>
              <th>CPUs</th>
            </tr>
          </thead>
          <tbody>{nodes.map(nodeRow)}</tbody>
        </table>
      )}
      <p className="muted">
        Send a training here with <code>gpufleet train … --pool {pool.name}</code>; Slurm queues it.
      </p>
    </section>
  );
}

/** The Slurm pools beside the team's hosts: each partition's nodes and GPUs as Slurm reports them. */
export function PoolsSection() {
  const q = useQuery('pools', (signal) => endpoints.pools(signal), 30_000);
  const pools = q.data?.data ?? [];
  if (pools.length === 0) return null;
  return (
    <div data-testid="pools">
      <h2 className="pools-title">Slurm pools</h2>
      {pools.map((p) => (
        <PoolGroup key={p.id} pool={p} />
      ))}
    </div>
  );
}
