import { act, render, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { MemoryRouter, Route, Routes } from 'react-router-dom';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { ApiError } from '../../api/client';
import { endpoints } from '../../api/endpoints';
import { candidate, gpu, recipe, recipeField, recipes, recommendation, training, validation } from '../../test/factories';
import type { FitResponse, Pool, Recipe } from '../../api/types';
import { useFleet } from '../fleet/useFleet';
import { CreateTrainingPage, EstimateLine } from './CreateTrainingPage';

vi.mock('../fleet/useFleet', () => ({ useFleet: vi.fn() }));
const GiB = 1024 ** 3;
/** A Slurm pool of 2-GPU nodes, as GET /pools lists it. */
const CLUSTER = { name: 'cluster', kind: 'slurm', partition: 'gpu', gpus_per_node: 2, gpu_model: 'H100-80GB', gpu_memory: 80 * GiB,
                  checkpoint_root: '/shared', python: '/usr/bin/python3', created_at: '2026-11-29T00:00:00Z', nodes: [] } as unknown as Pool;

function setup(opts: { extraRecipes?: Recipe[]; recipesError?: ApiError; pools?: Pool[] } = {}) {
  const gpus = [
    gpu('sim-host', 0),
    gpu('sim-host', 1),
    gpu('sim-host', 2, { availability: { state: 'foreign-busy', reason: 'pid 7 (bob) holds 70 GiB', free_memory: 6 * GiB, holders: [] } }),
  ];
  vi.mocked(useFleet).mockReturnValue({ data: { data: gpus, count: 3, simulated: true }, error: null, loading: false, reload: vi.fn(), gpus, byHost: [['sim-host', gpus]], simulated: true });
  const recommend = vi.spyOn(endpoints, 'recommend').mockResolvedValue(recommendation(10 * GiB, [candidate('sim-host', [1])]));
  const validate = vi.spyOn(endpoints, 'validate').mockImplementation(async ({ gpu_ids = [] }) =>
    (gpu_ids ?? []).includes(2)
      ? validation('sim-host', gpu_ids ?? [], [{ code: 'short-of-memory', message: 'GPU 2 is short of memory by 4.0 GiB', gpu_index: 2 }], [{ code: 'no-peer-access', message: 'GPUs 1 and 2 have no peer access' }])
      : validation('sim-host', gpu_ids ?? []),
  );
  const create = vi.spyOn(endpoints, 'createTraining');
  vi.spyOn(endpoints, 'pools').mockResolvedValue({ data: opts.pools ?? [], count: opts.pools?.length ?? 0 });
  const listRecipes = vi.spyOn(endpoints, 'recipes');
  if (opts.recipesError) listRecipes.mockRejectedValue(opts.recipesError);
  else listRecipes.mockResolvedValue(recipes(...(opts.extraRecipes ?? [])));
  render(
    <MemoryRouter initialEntries={['/trainings/new']}>
      <Routes>
        <Route path="/trainings/new" element={<CreateTrainingPage />} />
        <Route path="/trainings/:id" element={<div data-testid="detail" />} />
      </Routes>
    </MemoryRouter>,
  );
  return { recommend, validate, create, listRecipes };
}

/** The recommended GPU is checked once the (debounced) recommendation answered; slow machines take a while. */
const preselected = () => waitFor(() => expect(screen.getByLabelText(/sim-host · GPU 1/)).toBeChecked(), { timeout: 5000 });

describe('CreateTrainingPage', () => {
  beforeEach(() => vi.mocked(useFleet).mockReset());

  it('preselects the recommended GPUs and shows the memory need', async () => {
    const { recommend } = setup();
    await waitFor(() => expect(screen.getByTestId('estimate')).toHaveTextContent('10.0 GiB'));
    // The server's own figure and words, not a second rounding of its bytes.
    expect(screen.getByTestId('estimate-need')).toHaveTextContent('estimated 10.0 GiB per rank');
    expect(recommend.mock.calls[0][0]).toMatchObject({ recipe: 'sae', count: 1, config: expect.objectContaining({ d_in: 64 }) });
    await preselected();
    expect(screen.getByLabelText(/sim-host · GPU 0/)).not.toBeChecked();
    // GPU 2 has 6 GiB free: the indicator says it falls short.
    expect(screen.getByTestId('sel-sim-host-2')).toHaveTextContent('short by 4.0 GiB');
  });

  it('fits the config to the fleet: the pick fills the layout fields and the GPU count', async () => {
    const { recommend } = setup();
    const why = '2 GPU(s), ddp, micro-batch 64 x 2 accumulation pass(es) fits now on sim-host GPU(s) 0, 1';
    const fit = vi.spyOn(endpoints, 'fit').mockResolvedValue({
      recipe: 'sae', global_batch_size: 256, why, options: [], never: [],
      pick: { world_size: 2, strategy: 'ddp', micro_batch_size: 64, grad_accum_steps: 2, memory_bytes: 10 * GiB, fits: 'now', host: 'sim-host', gpu_indexes: [0, 1], reason: '', config: { strategy: 'ddp', micro_batch_size: 64, grad_accum_steps: 2 } },
    } as FitResponse);
    await preselected();
    await userEvent.click(screen.getByRole('button', { name: 'Fit to the fleet' }));
    await waitFor(() => expect(screen.getByTestId('fit-why')).toHaveTextContent(why));
    // The server lays out the global batch itself: the layout fields the form holds are not sent.
    expect(fit.mock.calls[0][0]).toMatchObject({ recipe: 'sae', config: expect.objectContaining({ d_in: 64, global_batch_size: 256 }) });
    expect(fit.mock.calls[0][0].config).not.toHaveProperty('strategy');
    expect(screen.getByLabelText('GPUs wanted')).toHaveValue(2);
    expect(screen.getByLabelText('Micro-batch per rank')).toHaveValue('64');
    expect(screen.getByLabelText('Strategy')).toHaveValue('ddp');
    // The recommendation follows the picked layout, so the preselected set is where it fits.
    await waitFor(() => expect(recommend).toHaveBeenLastCalledWith(expect.objectContaining({ count: 2, config: expect.objectContaining({ micro_batch_size: 64, strategy: 'ddp' }) })));
  });

  it('says why nothing fits and leaves the form as it was', async () => {
    setup();
    vi.spyOn(endpoints, 'fit').mockResolvedValue({ recipe: 'sae', global_batch_size: 256, pick: null, options: [], never: [], why: 'nothing fits on any host of the fleet: 1 GPU(s) with single: even a micro-batch of 1 holds more' } as FitResponse);
    await preselected();
    await userEvent.click(screen.getByRole('button', { name: 'Fit to the fleet' }));
    await waitFor(() => expect(screen.getByTestId('fit-why')).toHaveTextContent('nothing fits on any host'));
    expect(screen.getByTestId('fit-why')).toHaveClass('field-error');
    expect(screen.getByLabelText('GPUs wanted')).toHaveValue(1);
    expect(screen.getByLabelText('Strategy')).toHaveValue('auto');
  });

  it('shows validation problems inline before submit', async () => {
    const { validate } = setup();
    await preselected();
    await userEvent.click(screen.getByLabelText(/sim-host · GPU 2/));
    await waitFor(() => expect(screen.getByTestId('sel-sim-host-2')).toHaveTextContent('GPU 2 is short of memory by 4.0 GiB'));
    expect(validate).toHaveBeenLastCalledWith(expect.objectContaining({ host: 'sim-host', gpu_ids: [1, 2] }));
    expect(within(screen.getByRole('list', { name: 'Selection problems' })).getByText('GPUs 1 and 2 have no peer access')).toBeInTheDocument();
  });

  it('checks fields as they are typed and blocks submit until they are fixed', async () => {
    setup();
    const steps = await screen.findByLabelText('Steps');
    await userEvent.clear(steps);
    await userEvent.type(steps, '12.5');
    expect(screen.getByText('a whole number')).toBeInTheDocument();
    expect(screen.getByRole('button', { name: 'Start training' })).toBeDisabled();
  });

  it('submits the config and the chosen GPUs, then opens the training', async () => {
    const { create } = setup();
    create.mockResolvedValue(training({ id: 'new-id', status: 'queued' }));
    await preselected();
    await userEvent.click(screen.getByLabelText(/sim-host · GPU 0/));
    await userEvent.click(screen.getByRole('button', { name: 'Start training' }));
    await waitFor(() => expect(screen.getByTestId('detail')).toBeInTheDocument());
    expect(create.mock.calls[0][0]).toMatchObject({ recipe: 'sae', gpu_ids: [0, 1], host: 'sim-host', distributed: true, config: expect.objectContaining({ max_steps: 200 }) });
  });

  it('sends a training to a Slurm pool with only how many GPUs, and fits it to the pool', async () => {
    const { create } = setup({ pools: [CLUSTER] });
    create.mockResolvedValue(training({ id: 'new-id', status: 'queued' }));
    const fit = vi.spyOn(endpoints, 'fit').mockResolvedValue({
      recipe: 'sae', global_batch_size: 256, why: "4 GPU(s) of pool cluster hold it; Slurm decides when it starts", options: [], never: [],
      pick: { world_size: 4, strategy: 'ddp', micro_batch_size: 64, grad_accum_steps: 1, memory_bytes: 10 * GiB, fits: 'now', host: null, gpu_indexes: [], pool: 'cluster', reason: '', config: { strategy: 'ddp', micro_batch_size: 64, grad_accum_steps: 1 } },
    } as unknown as FitResponse);
    await preselected();
    await userEvent.selectOptions(screen.getByLabelText('Where'), 'cluster');
    // The team's GPU picker gives way to the pool's own scheduler.
    expect(screen.queryByLabelText(/sim-host · GPU 0/)).not.toBeInTheDocument();
    await userEvent.click(screen.getByRole('button', { name: 'Fit to the pool' }));
    await waitFor(() => expect(screen.getByTestId('fit-why')).toHaveTextContent('Slurm decides when it starts'));
    expect(fit.mock.calls[0][0]).toMatchObject({ recipe: 'sae', pool: 'cluster' });
    expect(screen.getByTestId('on-pool')).toHaveTextContent('4 GPUs in Slurm pool cluster: Slurm decides when and on which nodes it runs (over 2 nodes of 2 GPUs)');
    await userEvent.click(screen.getByRole('button', { name: 'Start training' }));
    await waitFor(() => expect(screen.getByTestId('detail')).toBeInTheDocument());
    expect(create.mock.calls[0][0]).toMatchObject({ recipe: 'sae', pool: 'cluster', world_size: 4, distributed: true });
    expect(create.mock.calls[0][0]).not.toHaveProperty('gpu_ids');
    expect(create.mock.calls[0][0]).not.toHaveProperty('host');
  });

  it('lets a training the team\'s hosts can never hold go to the pool the member allows (or_pool)', async () => {
    const { create, recommend } = setup({ pools: [CLUSTER] });
    create.mockResolvedValue(training({ id: 'new-id', status: 'queued' }));
    recommend.mockRejectedValue(new ApiError(422, 'needs 120.0 GiB per GPU; the largest GPU in the fleet has 80.0 GiB'));
    await waitFor(() => expect(screen.getByTestId('refused')).toHaveTextContent('the largest GPU in the fleet has 80.0 GiB'));
    // The team's hosts alone: the form stops, saying the request can never be placed.
    expect(screen.getByRole('button', { name: 'Start training' })).toBeDisabled();
    await userEvent.selectOptions(screen.getByLabelText('Where'), "The team's hosts, or pool cluster when they can never hold it");
    expect(screen.getByTestId('refused')).toHaveTextContent("The team's hosts can never hold it (needs 120.0 GiB per GPU; the largest GPU in the fleet has 80.0 GiB): it goes to Slurm pool cluster.");
    await userEvent.click(screen.getByRole('button', { name: 'Start training' }));
    await waitFor(() => expect(screen.getByTestId('detail')).toBeInTheDocument());
    expect(create.mock.calls[0][0]).toMatchObject({ recipe: 'sae', or_pool: 'cluster', world_size: 1, distributed: false });
    expect(create.mock.calls[0][0]).not.toHaveProperty('pool');
    expect(create.mock.calls[0][0]).not.toHaveProperty('gpu_ids');
  });

  it('offers no choice of place when the team has no pool', async () => {
    setup();
    await preselected();
    expect(screen.queryByLabelText('Where')).not.toBeInTheDocument();
  });

  it('puts a refused field next to its input', async () => {
    const { create } = setup();
    create.mockRejectedValue(new ApiError(422, 'config.n_latents: must be >= d_in', { 'config.n_latents': 'must be >= d_in' }));
    await preselected();
    await userEvent.click(screen.getByRole('button', { name: 'Start training' }));
    await waitFor(() => expect(screen.getByRole('alert')).toHaveTextContent('config.n_latents: must be >= d_in'));
    expect(screen.getByLabelText('Latents')).toHaveAttribute('aria-invalid', 'true');
  });

  it('offers a recipe and fields only the server knows, with the server defaults', async () => {
    const toy = recipe('toy', [
      recipeField('width', 'int', 3, { help: 'how wide the toy is' }),
      recipeField('shape', 'choice', 'round', { choices: ['round', 'square'] }),
      recipeField('loud', 'bool', false),
    ], { description: 'a recipe from a plugin' });
    const { create, listRecipes } = setup({ extraRecipes: [toy] });
    create.mockResolvedValue(training({ id: 'toy-id', status: 'queued' }));
    expect(listRecipes).toHaveBeenCalled();
    // The built-in recipe's field the overlay does not know is there, under "More fields".
    expect(await screen.findByLabelText('dead_steps')).toHaveValue('100');
    expect(screen.getByText('More fields (3)')).toBeInTheDocument();
    await preselected();

    await userEvent.selectOptions(screen.getByLabelText('Recipe'), 'toy');
    expect(screen.getByText('a recipe from a plugin')).toBeInTheDocument();
    expect(screen.getByLabelText('width')).toHaveValue('3');
    expect(screen.getByText('how wide the toy is')).toBeInTheDocument();
    expect(screen.getByLabelText('shape')).toHaveValue('round');
    expect(screen.getByLabelText('Steps')).toHaveValue('200');
    expect(screen.queryByText(/More fields/)).not.toBeInTheDocument();
    await userEvent.clear(screen.getByLabelText('width'));
    await userEvent.type(screen.getByLabelText('width'), '7');
    await userEvent.selectOptions(screen.getByLabelText('shape'), 'square');
    await userEvent.selectOptions(screen.getByLabelText('loud'), 'true');
    await userEvent.click(screen.getByRole('button', { name: 'Start training' }));
    await waitFor(() => expect(screen.getByTestId('detail')).toBeInTheDocument());
    expect(create.mock.calls[0][0]).toMatchObject({ recipe: 'toy', config: expect.objectContaining({ width: 7, shape: 'square', loud: true, max_steps: 200 }) });
    expect(create.mock.calls[0][0].name).toMatch(/^toy-/);
  });

  it('says when the recipes cannot be loaded and does not submit', async () => {
    setup({ recipesError: new ApiError(0, 'the server cannot be reached') });
    expect(await screen.findByRole('alert')).toHaveTextContent('Could not load the recipes: the server cannot be reached');
    expect(screen.getByRole('button', { name: 'Start training' })).toBeDisabled();
  });

  it('shows a refused config as refused, not "estimating", and blocks Start', async () => {
    const { recommend } = setup();
    await waitFor(() => expect(screen.getByTestId('estimate-need')).toHaveTextContent('10.0 GiB'));
    recommend.mockRejectedValue(new ApiError(422, 'this request can never be placed: needs 900.0 GiB per GPU'));
    const latents = screen.getByLabelText('Latents');
    await userEvent.clear(latents);
    await userEvent.type(latents, '99999999');
    await waitFor(() => expect(screen.getByTestId('refused')).toHaveTextContent('needs 900.0 GiB per GPU'));
    expect(screen.getByTestId('estimate-need')).toHaveTextContent('the server refuses this request');
    expect(screen.getByTestId('estimate-need')).not.toHaveTextContent('estimating');
    expect(screen.getByRole('button', { name: 'Start training' })).toBeDisabled();
  });

  it('drops the estimate of a config that changed, and a superseded late answer', async () => {
    const { recommend } = setup();
    await waitFor(() => expect(screen.getByTestId('estimate-need')).toHaveTextContent('10.0 GiB'));
    let lateAnswer: (v: ReturnType<typeof recommendation>) => void = () => undefined;
    recommend.mockImplementation(({ config }) =>
      (config as { n_latents?: number }).n_latents === 4096
        ? Promise.resolve(recommendation(20 * GiB, [candidate('sim-host', [1])]))
        : new Promise((ok) => (lateAnswer = ok)),
    );
    const latents = screen.getByLabelText('Latents');
    await userEvent.clear(latents);
    // The form no longer says what the old figure was asked for: it is gone at once.
    expect(screen.getByTestId('estimate-need')).not.toHaveTextContent('10.0 GiB');
    await userEvent.type(latents, '4096');
    await waitFor(() => expect(screen.getByTestId('estimate-need')).toHaveTextContent('20.0 GiB'));
    // An answer to a request made for an earlier state of the form changes nothing.
    await act(async () => lateAnswer(recommendation(30 * GiB, [])));
    expect(screen.getByTestId('estimate-need')).toHaveTextContent('20.0 GiB');
    expect(screen.getByTestId('estimate')).not.toHaveTextContent('30.0 GiB');
  });
});

describe('EstimateLine', () => {
  it('says how long a slow estimate has taken, and shows the answer once it comes', () => {
    vi.useFakeTimers();
    try {
      const { rerender } = render(<EstimateLine text="estimating…" />);
      expect(screen.getByText('estimating…')).toBeInTheDocument();
      act(() => vi.advanceTimersByTime(5000));
      expect(screen.getByText(/estimating… 5 s \(the server traces this config once; a busy server takes longer\)/)).toBeInTheDocument();
      rerender(<EstimateLine text="2.0 GiB" />);
      expect(screen.getByText('2.0 GiB')).toBeInTheDocument();
    } finally {
      vi.useRealTimers();
    }
  });
});
