"""The client's calls for sweeps (mixed into ``gpufleet.client.Client``)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet import wire

if TYPE_CHECKING:
    from gpufleet.wire.sweep_requests import SweepCreate
    from gpufleet.wire.sweeps import SweepCurvesPublic, SweepDetail, SweepsPublic
from gpufleet.client.errors import InvalidRequest
from gpufleet.client.sharing import SharingCalls, checked

API = "/api/v1"


def read_sweep_file(path: str | Path) -> dict[str, Any]:
    """A sweep file (YAML) as a mapping; :class:`InvalidRequest` saying what is wrong with it."""
    import yaml

    from gpufleet import yamltext

    p = Path(path)
    try:
        data = yamltext.load(p.read_text())
    except OSError as exc:
        raise InvalidRequest(f"sweep file {p}", [("", str(exc.strerror or exc))]) from None
    except yaml.YAMLError as exc:
        raise InvalidRequest(f"sweep file {p}", [("", f"not valid YAML: {exc}")]) from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"sweep file {p}", [("", "must hold a mapping (name, recipe or script, space, ...)")])
    return data


class SweepCalls(SharingCalls):
    """Sweeps (and, through SharingCalls, sharing), over the methods ``Client`` provides (``_get``, ``_post``,
    ``_create``)."""

    _create: Any

    def start_sweep(self, body: SweepCreate | dict[str, Any]) -> SweepDetail:
        """Start a sweep (the body of a sweep file); its trials are queued as trainings of yours."""
        if isinstance(body, dict):
            from gpufleet.wire.sweep_requests import (
                SweepCreate,  # the server's own checks, loaded when a sweep starts
            )

            body = checked(SweepCreate, "start_sweep", **body)
        return self._create(wire.SweepDetail, f"{API}/sweeps", body)

    def sweeps(self, *, owner: str | None = None, limit: int = 50, offset: int = 0) -> SweepsPublic:
        return self._get(wire.SweepsPublic, f"{API}/sweeps", owner=owner, limit=limit, offset=offset)

    def sweep(self, sweep_id: uuid.UUID | str) -> SweepDetail:
        return self._get(wire.SweepDetail, f"{API}/sweeps/{uuid.UUID(str(sweep_id))}")

    def sweep_curves(self, sweep_id: uuid.UUID | str) -> SweepCurvesPublic:
        return self._get(wire.SweepCurvesPublic, f"{API}/sweeps/{uuid.UUID(str(sweep_id))}/curves")

    def cancel_sweep(self, sweep_id: uuid.UUID | str) -> SweepDetail:
        """Cancel the sweep and every trial of it (idempotent)."""
        return self._post(wire.SweepDetail, f"{API}/sweeps/{uuid.UUID(str(sweep_id))}/cancel")


__all__ = ["SweepCalls", "checked", "read_sweep_file"]
