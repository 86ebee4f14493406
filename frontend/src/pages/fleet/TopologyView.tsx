import { endpoints } from '../../api/endpoints';
import { useQuery } from '../../api/useQuery';
import { Empty, ErrorState, Loading } from '../../components/States';

/** Cell colour by link quality, best (NVLink) to worst (across sockets). */
function linkClass(v: string): string {
  if (v === 'X') return 'topo-self';
  if (v.startsWith('NV')) return 'topo-nv';
  if (v === 'PIX' || v === 'PXB') return 'topo-pcie';
  if (v === 'PHB' || v === 'NODE') return 'topo-node';
  return 'topo-sys';
}

const LEGEND: [string, string][] = [
  ['NV#', 'NVLink (number of links)'],
  ['PIX / PXB', 'PCIe switch'],
  ['PHB / NODE', 'PCIe host bridge, same NUMA node'],
  ['SYS', 'across CPU sockets'],
  ['dashed', 'no peer access'],
];

export function TopologyView() {
  const q = useQuery('topology', (s) => endpoints.topology(s));
  if (q.error && !q.data) return <ErrorState error={q.error} onRetry={q.reload} />;
  if (!q.data) return <Loading what="topology" />;
  if (q.data.hosts.length === 0) return <Empty title="No hosts registered yet." />;
  return (
    <section aria-label="Topology" data-testid="topology-view">
      {q.data.hosts.map((h) => (
        <div className="panel" key={h.host}>
          <h3>{h.host}</h3>
          {h.gpus.length < 2 ? (
            <p className="muted">{h.gpus.length === 1 ? 'One GPU: no links to show.' : 'No GPUs.'}</p>
          ) : (
            <table className="topo">
              <thead>
                <tr>
                  <th />
                  {h.gpus.map((g) => (
                    <th key={g} scope="col">
                      GPU{g}
                    </th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {h.matrix.map((row, i) => (
                  <tr key={h.gpus[i]}>
                    <th scope="row">GPU{h.gpus[i]}</th>
                    {row.map((v, j) => {
                      const a = Math.min(h.gpus[i], h.gpus[j]);
                      const b = Math.max(h.gpus[i], h.gpus[j]);
                      const link = h.links.find((l) => l.gpu_a === a && l.gpu_b === b);
                      const peer = link ? (link.peer_access ? ', peer access' : ', no peer access') : '';
                      return (
                        <td key={j} className={`${linkClass(v)}${link && !link.peer_access ? ' topo-nopeer' : ''}`} title={`GPU${h.gpus[i]} ↔ GPU${h.gpus[j]}: ${v}${peer}`}>
                          {v}
                        </td>
                      );
                    })}
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </div>
      ))}
      <dl className="legend">
        {LEGEND.map(([k, v]) => (
          <div key={k}>
            <dt>{k}</dt>
            <dd>{v}</dd>
          </div>
        ))}
      </dl>
    </section>
  );
}
