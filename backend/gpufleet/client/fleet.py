"""The client's calls about the fleet itself: GPUs, hosts, topology, recipes, recommend and validate, drain
(mixed into ``gpufleet.client.Client``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from gpufleet import wire
from gpufleet.client.sharing import checked

if TYPE_CHECKING:
    from gpufleet.wire.metrics import LivePublic
    from gpufleet.wire.recipes import RecipesPublic
    from gpufleet.wire.selection import FitPublic, RecommendationPublic, ValidationPublic
    from gpufleet.wire.system import DrainPublic, GPUsPublic, HostsPublic, TopologyPublic

API = "/api/v1"


class FleetCalls:
    """Read the fleet and act on its GPUs, over ``Client``'s ``_get``, ``_post`` and ``request``."""

    _get: Any
    _post: Any
    request: Any

    def gpus(self, *, host: str | None = None) -> GPUsPublic:
        """Every GPU with its newest sample and availability (only ``host``'s when given)."""
        return self._get(wire.GPUsPublic, f"{API}/system/gpus", host=host)

    def hosts(self) -> HostsPublic:
        return self._get(wire.HostsPublic, f"{API}/system/hosts")

    def topology(self, *, host: str | None = None) -> TopologyPublic:
        return self._get(wire.TopologyPublic, f"{API}/system/topology", host=host)

    def live(self) -> LivePublic:
        """What ``gpufleet top`` shows: newest samples, aggregates, who holds each GPU."""
        from gpufleet.wire.metrics import LivePublic

        return self._get(LivePublic, f"{API}/system/metrics/live")

    def recipes(self) -> RecipesPublic:
        from gpufleet.wire.recipes import RecipesPublic

        return self._get(RecipesPublic, f"{API}/recipes")

    def recommend(self, *, recipe: str | None = None, config: dict[str, Any] | None = None,
                  memory_mb: int | None = None, count: int = 1, host: str | None = None,
                  policy: Literal["pack", "spread"] = "pack", exclusive: bool = True,
                  max_candidates: int = 5, pool: str | None = None) -> RecommendationPublic:
        """Ranked GPU sets for ``recipe`` (+ ``config``: memory from its estimate) or for ``memory_mb`` per GPU;
        with ``pool``, the layout on that Slurm pool's GPUs instead (the answer's ``pool``).

        Give one of the two, not both.
        """
        from gpufleet.wire.selection import RecommendationPublic, RecommendBody

        if (recipe is None) == (memory_mb is None):
            raise ValueError("give recipe (and optionally config) or memory_mb, not both and not neither")
        if recipe is not None:
            body = checked(RecommendBody, "recommend", recipe=recipe, config=config or {}, count=count, host=host,
                           policy=policy, exclusive=exclusive, max_candidates=max_candidates, pool=pool)
            return self._post(RecommendationPublic, f"{API}/system/gpus/recommend", body)
        return self._get(RecommendationPublic, f"{API}/system/gpus/recommend", memory_mb=memory_mb, count=count,
                         host=host, policy=policy, exclusive=str(exclusive).lower(), max_candidates=max_candidates,
                         pool=pool)

    def fit(self, recipe: str, config: dict[str, Any] | None = None, *, count: int | None = None,
            host: str | None = None, pool: str | None = None) -> FitPublic:
        """What fits: ranks, DDP or FSDP, the largest micro-batch and its accumulation passes, keeping the
        config's global batch, on the team's hosts or on a Slurm pool's GPUs (``pool``). Each layout is
        traced on the server: give the client a timeout of minutes."""
        from gpufleet.wire.selection import FitBody, FitPublic

        body = checked(FitBody, "fit", recipe=recipe, config=config or {}, count=count, host=host, pool=pool)
        return self._post(FitPublic, f"{API}/system/gpus/fit", body)

    def validate(self, gpu_ids: list[int], *, host: str | None = None, recipe: str | None = None,
                 config: dict[str, Any] | None = None, memory_mb: int | None = None,
                 exclusive: bool = True) -> ValidationPublic:
        """Is this selection usable for this training? Every problem at once (``ok`` false), and warnings."""
        from gpufleet.wire.selection import ValidateBody, ValidationPublic

        body = checked(ValidateBody, "validate", gpu_ids=gpu_ids, host=host, recipe=recipe, config=config,
                       memory_mb=memory_mb, exclusive=exclusive)
        return self._post(ValidationPublic, f"{API}/system/gpus/validate", body)

    def drain(self, host: str, index: int, reason: str | None = None) -> DrainPublic:
        """Stop placing trainings on a GPU (admins); trainings on it keep running."""
        return self._post(wire.DrainPublic, f"{API}/system/gpus/{host}/{index}/drain", wire.DrainRequest(reason=reason))

    def undrain(self, host: str, index: int) -> DrainPublic:
        return self._post(wire.DrainPublic, f"{API}/system/gpus/{host}/{index}/undrain")

    def clear_health(self, host: str, index: int) -> dict[str, Any]:
        """Put a GPU marked unhealthy back in scheduling (admins); ``cleared`` is the mark removed, or None."""
        return self.request("POST", f"{API}/system/gpus/{quote(host, safe='')}/{int(index)}/clear-health")

