"""GPU selection endpoints: ranked recommendations and validation of a choice.

Thin: parse, gather the fleet (``scheduling.inputs``), call the pure
functions, shape the answer. A config is estimated here, so torch is imported
on the first such request, never when the app starts.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.api.deps import SessionDep, SettingsDep, ViewerUser
from gpufleet.api.hosts import UNKNOWN_HOST, check_host
from gpufleet.scheduling.types import MiB, Recommendation, SelectionRequest

router = APIRouter(prefix="/api/v1/system/gpus", tags=["selection"])

MAX_COUNT = 64
MAX_MEMORY_MB = 16 * 1024 * 1024  # 16 TiB: far beyond any GPU, still a sane number


class EstimatePublic(BaseModel):
    total: int
    summary: str
    breakdown: dict[str, int]
    method: str
    key: str
    strategy: str
    precision: str
    world_size: int
    micro_batch_size: int
    parameter_count: int
    calibrated_from: int
    uncalibrated_total: int


class CandidatePublic(BaseModel):
    host: str
    gpu_indexes: list[int]
    score: float
    connection: str
    reasons: list[str]
    free_memory: list[int]
    weights: list[float]


class RecommendationPublic(BaseModel):
    memory_bytes: int
    count: int
    host: str | None
    policy: str
    candidates: list[CandidatePublic]
    wait_reason: str | None = None
    estimate: EstimatePublic | None = None


class RecommendBody(BaseModel):
    """A full training config: the memory comes from its estimate."""

    model_config = ConfigDict(extra="forbid")

    recipe: str = Field(min_length=1, max_length=128)
    config: dict[str, Any] = Field(default_factory=dict)
    count: int = Field(default=1, ge=1, le=MAX_COUNT)
    host: str | None = Field(default=None, max_length=255)
    policy: Literal["pack", "spread"] = "pack"
    exclusive: bool = True
    max_candidates: int = Field(default=5, ge=1, le=50)


class ValidateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu_ids: list[int] = Field(min_length=1, max_length=MAX_COUNT)
    host: str | None = Field(default=None, max_length=255)
    memory_mb: int | None = Field(default=None, ge=0, le=MAX_MEMORY_MB)
    recipe: str | None = Field(default=None, max_length=128)
    config: dict[str, Any] | None = None
    exclusive: bool = True

    @model_validator(mode="after")
    def _one_memory_source(self) -> ValidateBody:
        if self.memory_mb is not None and self.recipe is not None:
            raise ValueError("give memory_mb or recipe (+ config), not both")
        if self.config is not None and self.recipe is None:
            raise ValueError("config needs recipe: name the recipe the config is for")
        return self


class ProblemPublic(BaseModel):
    code: str
    message: str
    gpu_index: int | None = None


class ValidationPublic(BaseModel):
    ok: bool
    host: str | None
    gpu_ids: list[int]
    memory_bytes: int
    problems: list[ProblemPublic]
    warnings: list[ProblemPublic]
    weights: list[float]
    estimate: EstimatePublic | None = None


def _estimate_public(est: Any) -> EstimatePublic:
    return EstimatePublic(
        total=est.total, summary=est.summary(), breakdown=est.breakdown(), method=est.method, key=est.key,
        strategy=est.strategy, precision=est.precision, world_size=est.world_size,
        micro_batch_size=est.micro_batch_size, parameter_count=est.parameter_count,
        calibrated_from=est.calibrated_from, uncalibrated_total=est.uncalibrated_total,
    )


def _public(rec: Recommendation, estimate: Any = None) -> RecommendationPublic:
    if rec.refused is not None:
        # It can never fit: say so now instead of letting it queue forever.
        raise HTTPException(422, f"this request can never be placed: {rec.refused}")
    r = rec.request
    return RecommendationPublic(
        memory_bytes=r.memory_bytes, count=r.count, host=r.host, policy=r.policy,
        candidates=[
            CandidatePublic(host=c.host, gpu_indexes=list(c.gpu_indexes), score=c.score,
                            connection=c.connection, reasons=list(c.reasons),
                            free_memory=list(c.free_memory), weights=list(c.weights))
            for c in rec.candidates
        ],
        wait_reason=rec.wait_reason,
        estimate=_estimate_public(estimate) if estimate is not None else None,
    )


def _estimate(sess: Any, settings: Any, recipe: str, config: dict[str, Any], count: int) -> Any:
    from gpufleet.scheduling.memory import EstimateError
    from gpufleet.scheduling.plan import estimate_for
    from gpufleet.training.config import ConfigError

    try:
        return estimate_for(sess, recipe, config, world_size=count, data_root=settings.data_root)
    except (ConfigError, EstimateError) as exc:
        raise HTTPException(422, str(exc)) from None


@router.get("/recommend", response_model=RecommendationPublic, operation_id="gpus-recommend", responses=UNKNOWN_HOST)
def recommend_gpus(
    sess: SessionDep,
    settings: SettingsDep,
    _user: ViewerUser,
    memory_mb: int | None = Query(
        default=None, ge=0, le=MAX_MEMORY_MB,
        description="Memory each GPU needs, in MiB. Give exactly one of `memory_mb` or `recipe`, not both and "
                    "not neither (422 otherwise).",
        examples=[20480],
    ),
    count: int = Query(default=1, ge=1, le=MAX_COUNT, description="How many GPUs (one DDP rank each), on one host."),
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
    ),
    config: str | None = Query(
        default=None, max_length=20000,
        description="The recipe's config fields as a JSON object; only with `recipe` (422 without it). "
                    "Omitted fields take the recipe's defaults.",
        examples=['{"d_in": 768, "n_latents": 16384, "precision": "bf16"}'],
    ),
) -> RecommendationPublic:
    """Ranked GPU sets on one host for ``count`` GPUs.

    The memory each GPU needs comes from exactly one of two sources: ``memory_mb``,
    or ``recipe`` (+ optional ``config`` as JSON), whose memory estimate is used.
    Both or neither is a 422. A request that can never fit is a 422 naming why;
    one that does not fit now is a 200 with no candidates and ``wait_reason``.
    """
    from gpufleet.scheduling.inputs import fleet_state
    from gpufleet.scheduling.recommend import recommend

    if (memory_mb is None) == (recipe is None):
        raise HTTPException(422, "give memory_mb, or recipe (and optionally config as JSON), but not both")
    check_host(sess, host)
    estimate = None
    if recipe is not None:
        try:
            values = json.loads(config) if config else {}
        except json.JSONDecodeError as exc:
            raise HTTPException(422, f"config is not valid JSON: {exc.msg} at position {exc.pos}") from None
        if not isinstance(values, dict):
            raise HTTPException(422, "config must be a JSON object of recipe fields")
        estimate = _estimate(sess, settings, recipe, values, count)
        memory = estimate.total
    elif config is not None:
        raise HTTPException(422, "config needs recipe: name the recipe the config is for")
    else:
        memory = int(memory_mb or 0) * MiB
    req = SelectionRequest(memory_bytes=memory, count=count, host=host, exclusive=exclusive,
                           policy=policy, max_candidates=max_candidates)
    fleet = fleet_state(sess, settings, estimate_key=estimate.key if estimate else None)
    return _public(recommend(req, fleet), estimate)


@router.post("/recommend", response_model=RecommendationPublic, operation_id="gpus-recommend-config",
             responses=UNKNOWN_HOST)
def recommend_for_config(
    body: RecommendBody, sess: SessionDep, settings: SettingsDep, _user: ViewerUser
) -> RecommendationPublic:
    """Ranked GPU sets for a full training config: its estimate, then the sets that hold it."""
    from gpufleet.scheduling.inputs import fleet_state
    from gpufleet.scheduling.recommend import recommend

    check_host(sess, body.host)
    estimate = _estimate(sess, settings, body.recipe, body.config, body.count)
    req = SelectionRequest(memory_bytes=estimate.total, count=body.count, host=body.host,
                           exclusive=body.exclusive, policy=body.policy, max_candidates=body.max_candidates)
    fleet = fleet_state(sess, settings, estimate_key=estimate.key)
    return _public(recommend(req, fleet), estimate)


@router.post("/validate", response_model=ValidationPublic, operation_id="gpus-validate", responses=UNKNOWN_HOST)
def validate_gpus(
    body: ValidateBody, sess: SessionDep, settings: SettingsDep, _user: ViewerUser
) -> ValidationPublic:
    """Is this GPU selection usable? Every problem at once, and warnings."""
    from gpufleet.scheduling.inputs import fleet_state
    from gpufleet.scheduling.validate import validate_selection

    check_host(sess, body.host)
    estimate = None
    memory = (body.memory_mb or 0) * MiB
    if body.recipe is not None:
        estimate = _estimate(sess, settings, body.recipe, body.config or {}, len(body.gpu_ids))
        memory = estimate.total
    fleet = fleet_state(sess, settings, estimate_key=estimate.key if estimate else None)
    v = validate_selection(fleet, body.gpu_ids, host=body.host, memory_bytes=memory, exclusive=body.exclusive)
    return ValidationPublic(
        ok=v.ok, host=v.host, gpu_ids=list(body.gpu_ids), memory_bytes=memory,
        problems=[ProblemPublic(code=p.code, message=p.message, gpu_index=p.gpu_index) for p in v.problems],
        warnings=[ProblemPublic(code=p.code, message=p.message, gpu_index=p.gpu_index) for p in v.warnings],
        weights=list(v.weights),
        estimate=_estimate_public(estimate) if estimate is not None else None,
    )
