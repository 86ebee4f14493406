import { render, screen } from '@testing-library/react';
import { describe, expect, it, vi } from 'vitest';
import { endpoints } from '../../api/endpoints';
import { TopologyView } from './TopologyView';

describe('TopologyView', () => {
  it('draws the link matrix with NVLink and PCIe cells told apart', async () => {
    vi.spyOn(endpoints, 'topology').mockResolvedValue({
      hosts: [
        {
          host: 'a100-01',
          gpus: [0, 1, 2],
          links: [{ gpu_a: 0, gpu_b: 2, nvlink_count: 0, pcie_level: 'SYS', peer_access: false }],
          matrix: [
            ['X', 'NV12', 'SYS'],
            ['NV12', 'X', 'PIX'],
            ['SYS', 'PIX', 'X'],
          ],
        },
      ],
    });
    render(<TopologyView />);
    const cell = await screen.findByTitle('GPU0 ↔ GPU1: NV12');
    expect(cell).toHaveClass('topo-nv');
    expect(screen.getByTitle('GPU1 ↔ GPU2: PIX')).toHaveClass('topo-pcie');
    expect(screen.getByTitle('GPU0 ↔ GPU2: SYS, no peer access')).toHaveClass('topo-sys', 'topo-nopeer');
    expect(screen.getByRole('heading', { name: 'a100-01' })).toBeInTheDocument();
  });
});
