"""GPU selection endpoints: ranked recommendations and validation of a choice.

Thin: parse, gather the fleet (``scheduling.inputs``), call the pure
functions, shape the answer. A config's memory is traced in the estimate
pool's processes (``scheduling.memory_pool``): bounded in number, time and
model size, cached by config and rate-limited per user, so no request can
stall this process.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool

from gpufleet.api.deps import SettingsDep, ViewerUser
from gpufleet.api.hosts import UNKNOWN_HOST, check_host
from gpufleet.wire.selection import (
    MAX_COUNT,
    AcrossHostsPublic,
    CandidatePublic,
    FitBody,
    FitOptionPublic,
    FitPublic,
    PoolFitPublic,
    ProblemPublic,
    RecommendationPublic,
    RecommendBody,
    ValidateBody,
    ValidationPublic,
    estimate_public,
)
from gpufleet.api.security.ratelimits import get_limiter, too_many
from gpufleet.bounds import MAX_MEMORY_MB
from gpufleet.db.session import session_factory
from gpufleet.scheduling.types import MiB, Recommendation, SelectionRequest
from gpufleet.wire.training_requests import check_config, installed_recipes

router = APIRouter(prefix="/api/v1/system/gpus", tags=["selection"])

def _candidate(c: Any) -> CandidatePublic:
    return CandidatePublic(host=c.host, gpu_indexes=list(c.gpu_indexes), score=c.score, connection=c.connection,
                           reasons=list(c.reasons), free_memory=list(c.free_memory), weights=list(c.weights))


def _across(req: SelectionRequest, across: bool) -> Any:
    """``fleet -> (recommendation, sets across hosts)``: those only when asked and no single host fits."""
    from gpufleet.scheduling.gang_select import recommend_across
    from gpufleet.scheduling.recommend import recommend

    def run(fleet: Any) -> Any:
        rec = recommend(req, fleet)
        if not across or rec.candidates or req.host is not None:
            return rec, []
        sets, why = recommend_across(req, fleet)
        if not sets and rec.refused is not None and why is not None and "the fleet has" in why:
            rec = Recommendation(request=req, refused=why)
        elif rec.refused is not None:
            rec = Recommendation(request=req, wait_reason=why or rec.refused)
        elif why is not None:
            rec = Recommendation(request=req, wait_reason=f"{rec.wait_reason}; across hosts: {why}")
        return rec, sets
    return run


def _public(rec: Recommendation, estimate: Any = None, sets: Any = ()) -> RecommendationPublic:
    if rec.refused is not None:
        # It can never fit: say so now instead of letting it queue forever.
        raise HTTPException(422, f"this request can never be placed: {rec.refused}")
    r = rec.request
    return RecommendationPublic(
        memory_bytes=r.memory_bytes, count=r.count, host=r.host, policy=r.policy,
        candidates=[_candidate(c) for c in rec.candidates],
        wait_reason=rec.wait_reason,
        estimate=estimate_public(estimate) if estimate is not None else None,
        across_hosts=[AcrossHostsPublic(hosts=c.hosts, parts=[_candidate(p) for p in c.parts],
                                        reasons=list(c.reasons)) for c in sets],
    )


def _on_pool(settings: Any, name: str, memory: int, count: int, policy: str,
             estimate: Any = None) -> RecommendationPublic:
    """The recommendation on Slurm pool ``name``: the layout over its declared GPUs, and its nodes now."""
    from gpufleet.pools import service as pools
    from gpufleet.wire.pools import PoolNode

    try:
        f = pools.fit_on(settings, name, memory, count)
    except pools.PoolError as exc:
        raise HTTPException(exc.status, str(exc)) from None
    d = f.gpus
    nodes = None if d.node_states is None else [
        PoolNode(name=n.name, state=n.state, gres=n.gres, gres_used=n.gres_used, cpus=n.cpus) for n in d.node_states]
    return RecommendationPublic(
        memory_bytes=memory, count=count, host=None, policy=policy, candidates=[],
        estimate=estimate_public(estimate) if estimate is not None else None,
        pool=PoolFitPublic(pool=d.name, nodes=f.nodes, gpus_per_node=f.gpus_per_node, gpu_model=d.gpu_model,
                           gpu_memory=d.gpu_memory, reason=f.reason, partition_nodes=nodes))


def get_estimate_pool(app: Any, settings: Any) -> Any:
    """This app's pool of estimate processes, made on first use."""
    from gpufleet.scheduling.memory_pool import EstimatePool

    pool = getattr(app.state, "estimate_pool", None)
    if pool is None:
        pool = EstimatePool(workers=settings.estimate_workers, budget_s=settings.estimate_budget_s,
                            cache_dir=settings.data_dir / "estimates")
        app.state.estimate_pool = pool
    return pool


async def warm_estimates(app: Any, settings: Any) -> None:
    """Trace every installed recipe's default config in the pool, before the first request asks for one.

    Starting the pool's process (importing torch) and a first trace took seconds
    on a busy machine: the first ``recommend?recipe=sae`` paid them all.
    """
    from gpufleet.engine.recipes import recipe_names

    await get_estimate_pool(app, settings).warm(recipe_names(), settings.data_root)


def _check_estimate_rate(app: Any, settings: Any, user: Any) -> None:
    retry = get_limiter(app, settings).hit(f"estimate:{user.name}", settings.estimate_rate_per_minute, 60.0)
    if retry is not None:
        raise too_many(
            f"user {user.name!r} asked for {settings.estimate_rate_per_minute} memory estimates in the last"
            " minute, the most allowed (GPUFLEET_ESTIMATE_RATE_PER_MINUTE)",
            retry,
        )


async def _estimate(request: Request, settings: Any, user: Any, recipe: str, config: dict[str, Any],
                    count: int) -> Any:
    """The calibrated estimate, counted against the user's estimate rate (:func:`_traced`)."""
    await run_in_threadpool(_check_estimate_rate, request.app, settings, user)
    return await _traced(request, settings, recipe, config, count)


async def _traced(request: Request, settings: Any, recipe: str, config: dict[str, Any], count: int) -> Any:
    """The calibrated estimate; its trace runs in the estimate pool, never in this process.

    A request waits for a free estimate process without holding a thread, so
    a burst of large configs cannot starve the other routes. A full pool is a
    429, a config the recipe or the estimator refuses a 422.
    """
    from gpufleet.scheduling.memory import EstimateError
    from gpufleet.scheduling.memory_pool import EstimateBusy
    from gpufleet.scheduling.plan import estimate_for
    from gpufleet.engine.config import TrainingConfigError

    try:
        await get_estimate_pool(request.app, settings).trace(recipe, config, count, settings.data_root)

        def calibrated() -> Any:
            # The trace is cached now: this reads the calibration and adds up, in a thread.
            with session_factory(settings)() as sess:
                return estimate_for(sess, recipe, config, world_size=count, data_root=settings.data_root)

        return await run_in_threadpool(calibrated)
    except EstimateBusy as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(exc.retry_after_s)}) from None
    except (TrainingConfigError, EstimateError) as exc:
        raise HTTPException(422, str(exc)) from None


def _fleet(settings: Any, estimate_key: str | None, fn: Any) -> Any:
    from gpufleet.scheduling.inputs import fleet_state

    with session_factory(settings)() as sess:
        return fn(fleet_state(sess, settings, settings, settings, settings, estimate_key=estimate_key))


def _known_host(settings: Any, host: str | None) -> None:
    """The unknown-host rule (404 naming the known hosts), on a session of its own."""
    if host is None:
        return
    with session_factory(settings)() as sess:
        check_host(sess, host)


@router.get("/recommend", response_model=RecommendationPublic, operation_id="gpus-recommend", responses=UNKNOWN_HOST)
async def recommend_gpus(
    request: Request,
    settings: SettingsDep,
    user: ViewerUser,
    memory_mb: int | None = Query(
        default=None, ge=0, le=MAX_MEMORY_MB,
        description="Memory each GPU needs, in MiB. Give exactly one of `memory_mb` or `recipe`, not both and "
                    "not neither (422 otherwise).",
        examples=[20480],
    ),
    count: int = Query(default=1, ge=1, le=MAX_COUNT,
                       description="How many GPUs (one DDP rank each), on one host; with `across_hosts`, "
                                   "on several when none holds them."),
    host: str | None = Query(default=None, max_length=255,
                             description="Only this host (404 if it is not registered)."),
    policy: Literal["pack", "spread"] = Query(
        default="pack", description="`pack`: best fit, keeps big GPUs free; `spread`: most headroom."),
    exclusive: bool = Query(default=True, description="False: may share GPUs with other small trainings."),
    max_candidates: int = Query(default=5, ge=1, le=50, description="How many ranked sets to return."),
    recipe: str | None = Query(
        default=None, max_length=128,
        description="Estimate the memory from this recipe's config instead of `memory_mb`. Give exactly one of "
                    "`recipe` or `memory_mb`. A long config is easier to send to `POST /recommend` "
                    "(`gpus-recommend-config`).",
        examples=["sae"],
        json_schema_extra=installed_recipes,
    ),
    config: str | None = Query(
        default=None, max_length=20000,
        description="The recipe's config fields as a JSON object; only with `recipe` (422 without it). "
                    "Omitted fields take the recipe's defaults.",
        examples=['{"d_in": 768, "n_latents": 16384, "precision": "bf16"}'],
    ),
    across_hosts: bool = Query(default=False, description="When no single host fits, offer sets across hosts "
                                                          "(fewest hosts first)."),
    pool: str | None = Query(default=None, min_length=1, max_length=63, pattern="^[a-z0-9][a-z0-9_-]*$",
                             description="On this Slurm pool's declared GPUs instead of the team's hosts: the "
                                         "answer's `pool` says the layout; not with `host` or `across_hosts`."),
) -> RecommendationPublic:
    """Ranked GPU sets on one host for ``count`` GPUs.

    The memory each GPU needs comes from exactly one of two sources: ``memory_mb``,
    or ``recipe`` (+ optional ``config`` as JSON), whose memory estimate is used.
    Both or neither is a 422. A request that can never fit is a 422 naming why;
    one that does not fit now is a 200 with no candidates and ``wait_reason``.
    """
    if (memory_mb is None) == (recipe is None):
        raise HTTPException(422, "give memory_mb, or recipe (and optionally config as JSON), but not both")
    if pool is not None and (host is not None or across_hosts):
        raise HTTPException(422, "give host or across_hosts (the team's hosts) or pool (a Slurm pool), not both")
    await run_in_threadpool(_known_host, settings, host)
    estimate = None
    if recipe is not None:
        try:
            values = json.loads(config) if config else {}
        except json.JSONDecodeError as exc:
            raise HTTPException(422, f"config is not valid JSON: {exc.msg} at position {exc.pos}") from None
        if not isinstance(values, dict):
            raise HTTPException(422, "config must be a JSON object of recipe fields")
        try:
            check_config(values)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        estimate = await _estimate(request, settings, user, recipe, values, count)
        memory = estimate.total
    elif config is not None:
        raise HTTPException(422, "config needs recipe: name the recipe the config is for")
    else:
        memory = int(memory_mb or 0) * MiB
    if pool is not None:
        return await run_in_threadpool(_on_pool, settings, pool, memory, count, policy, estimate)
    req = SelectionRequest(memory_bytes=memory, count=count, host=host, exclusive=exclusive,
                           policy=policy, max_candidates=max_candidates)
    rec, sets = await run_in_threadpool(_fleet, settings, estimate.key if estimate else None,
                                        _across(req, across_hosts))
    return _public(rec, estimate, sets)


@router.post("/recommend", response_model=RecommendationPublic, operation_id="gpus-recommend-config",
             responses=UNKNOWN_HOST)
async def recommend_for_config(
    body: RecommendBody, request: Request, settings: SettingsDep, user: ViewerUser
) -> RecommendationPublic:
    """Ranked GPU sets for a full training config: its estimate, then the sets that hold it."""
    await run_in_threadpool(_known_host, settings, body.host)
    estimate = await _estimate(request, settings, user, body.recipe, body.config, body.count)
    if body.pool is not None:
        return await run_in_threadpool(_on_pool, settings, body.pool, estimate.total, body.count, body.policy,
                                       estimate)
    req = SelectionRequest(memory_bytes=estimate.total, count=body.count, host=body.host,
                           exclusive=body.exclusive, policy=body.policy, max_candidates=body.max_candidates)
    rec, sets = await run_in_threadpool(_fleet, settings, estimate.key, _across(req, body.across_hosts))
    return _public(rec, estimate, sets)


@router.post("/fit", response_model=FitPublic, operation_id="gpus-fit", responses=UNKNOWN_HOST)
async def fit_config(body: FitBody, request: Request, settings: SettingsDep, user: ViewerUser) -> FitPublic:
    """What fits: the largest micro-batch per rank (the global batch kept through gradient accumulation),
    DDP or FSDP, and how many GPUs, on the fleet as it is now.

    Each layout tried is estimated as a training's would be (traced in the estimate pool, calibrated by
    earlier runs); the answer lists every world size and strategy tried with its largest micro-batch that
    fits, and picks one. A recipe or config that is wrong is a 422; a fleet with no host that can ever
    hold the training is a 200 with no pick and ``why`` saying so.
    """
    import anyio.from_thread

    from gpufleet.scheduling.fit import fit, fleet_placer, layout_values, most_gpus, pool_placer, world_sizes
    from gpufleet.engine.config import TrainingConfigError
    from gpufleet.engine.recipes import get_recipe

    await run_in_threadpool(_known_host, settings, body.host)
    pool = await run_in_threadpool(_fit_pool, settings, body.pool) if body.pool else None
    try:
        cfg = get_recipe(body.recipe).resolve_config(dict(body.config))
    except (TrainingConfigError, KeyError, ValueError) as exc:
        raise HTTPException(422, str(exc)) from None
    if cfg.parallel_mode != "equal":
        raise HTTPException(422, f"parallel_mode {cfg.parallel_mode} sets each rank's batch itself; a fit lays "
                                 "out equal ranks: leave parallel_mode at equal")
    # One fit is one estimate against the per-user limit, however many layouts it traces.
    await run_in_threadpool(_check_estimate_rate, request.app, settings, user)

    def search(fleet: Any) -> Any:
        most = body.count or (pool.gpus_per_node * pool.nodes if pool else most_gpus(fleet, body.host))
        worlds = [body.count] if body.count else world_sizes(cfg.global_batch_size, most)
        if not worlds or most == 0:
            raise HTTPException(422, "no host of the fleet has GPUs to fit on" if most == 0 else
                                f"global_batch_size {cfg.global_batch_size} does not split over any of "
                                f"1..{most} GPUs")
        if body.count and cfg.global_batch_size % body.count:
            raise HTTPException(422, f"global_batch_size {cfg.global_batch_size} is not divisible by "
                                     f"--count {body.count}")

        def estimate(world: int, strategy: str, micro: int, accum: int) -> Any:
            # The same traced, calibrated estimate as recommend's, from this search's thread.
            return anyio.from_thread.run(_traced, request, settings, body.recipe,
                                         layout_values(body.config, strategy, micro, accum), world)

        if pool is not None:
            placer = pool_placer(pool.name, pool.gpu_model, pool.gpu_memory, pool.gpus_per_node, pool.nodes)
            return fit(cfg.global_batch_size, worlds, estimate, placer, where=f"pool {pool.name}")
        return fit(cfg.global_batch_size, worlds, estimate, fleet_placer(fleet, body.host))

    # A pool's GPUs are what it declares: the team's fleet is not read for them.
    answer = await run_in_threadpool(search, None) if pool else await run_in_threadpool(_fleet, settings, None, search)

    def public(o: Any) -> FitOptionPublic:
        p = o.placement
        return FitOptionPublic(world_size=o.world_size, strategy=o.strategy, micro_batch_size=o.micro_batch_size,
                               grad_accum_steps=o.grad_accum_steps, memory_bytes=o.memory_bytes, fits=p.fits,
                               host=p.host, pool=p.pool, gpu_indexes=list(p.gpu_indexes), reason=p.reason,
                               config=layout_values({}, o.strategy, o.micro_batch_size, o.grad_accum_steps))
    return FitPublic(recipe=body.recipe, global_batch_size=answer.global_batch_size,
                     pick=public(answer.pick) if answer.pick else None, why=answer.why,
                     options=[public(o) for o in answer.options], never=list(answer.never))


def _fit_pool(settings: Any, name: str) -> Any:
    """Pool ``name``'s GPUs as its admin declared them; its 404 or 422 says what to do."""
    from gpufleet.pools import service as pools

    try:
        return pools.declared_gpus(settings, name)
    except pools.PoolError as exc:
        raise HTTPException(exc.status, str(exc)) from None


@router.post("/validate", response_model=ValidationPublic, operation_id="gpus-validate", responses=UNKNOWN_HOST)
async def validate_gpus(
    body: ValidateBody, request: Request, settings: SettingsDep, user: ViewerUser
) -> ValidationPublic:
    """Is this GPU selection usable? Every problem at once, and warnings."""
    from gpufleet.scheduling.validate import validate_selection

    await run_in_threadpool(_known_host, settings, body.host)
    for part in body.parts or []:
        await run_in_threadpool(_known_host, settings, part.host)
    estimate = None
    memory = (body.memory_mb or 0) * MiB
    if body.recipe is not None:
        estimate = await _estimate(request, settings, user, body.recipe, body.config or {}, body.count)
        memory = estimate.total
    if body.parts is not None:
        return await run_in_threadpool(_validate_across, settings, body, memory, estimate)
    v = await run_in_threadpool(
        _fleet, settings, estimate.key if estimate else None,
        lambda fleet: validate_selection(fleet, body.gpu_ids or (), host=body.host, memory_bytes=memory,
                                         exclusive=body.exclusive),
    )
    return ValidationPublic(
        ok=v.ok, host=v.host, gpu_ids=list(body.gpu_ids or []), memory_bytes=memory,
        problems=[ProblemPublic(code=p.code, message=p.message, gpu_index=p.gpu_index) for p in v.problems],
        warnings=[ProblemPublic(code=p.code, message=p.message, gpu_index=p.gpu_index) for p in v.warnings],
        weights=list(v.weights),
        estimate=estimate_public(estimate) if estimate is not None else None,
    )


def _validate_across(settings: Any, body: ValidateBody, memory: int, estimate: Any) -> ValidationPublic:
    from gpufleet.scheduling.gang_select import validate_across

    parts = [(p.host, list(p.gpu_ids)) for p in body.parts or []]
    ok, problems, warnings = _fleet(settings, estimate.key if estimate else None,
                                    lambda fleet: validate_across(fleet, parts, memory_bytes=memory,
                                                                  exclusive=body.exclusive))
    return ValidationPublic(
        ok=ok, host=parts[0][0], gpu_ids=[i for _, ids in parts for i in ids], memory_bytes=memory,
        problems=[ProblemPublic(code=c, message=m, gpu_index=i) for c, m, i in problems],
        warnings=[ProblemPublic(code=c, message=m, gpu_index=i) for c, m, i in warnings],
        weights=[], estimate=estimate_public(estimate) if estimate is not None else None,
    )
