"""The client's calls for pools (mixed into ``gpufleet.client.Client``); the shapes load when a call needs them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gpufleet import wire
from gpufleet.client.sharing import checked

if TYPE_CHECKING:
    from gpufleet.wire.pools import PoolPublic, PoolsPublic

API = "/api/v1/pools"


class PoolCalls:
    """Add, list, read and remove pools, over ``Client``'s ``_get``, ``_post`` and ``_send``."""

    _get: Any
    _post: Any
    _send: Any

    def pools(self) -> PoolsPublic:
        return self._get(wire.PoolsPublic, API)

    def pool(self, name: str) -> PoolPublic:
        return self._get(wire.PoolPublic, f"{API}/{quote(name, safe='')}")

    def add_pool(self, name: str, partition: str, **fields: Any) -> PoolPublic:
        """Add a Slurm partition as a pool (admins): ``account``, ``gpus_per_node``, ``gpu_model``,
        ``gpu_memory_mb``, ``checkpoint_root``, ``python``."""
        body = checked(wire.PoolCreate, "add_pool", kind="slurm", name=name, partition=partition,
                       **{k: v for k, v in fields.items() if v is not None})
        return self._post(wire.PoolPublic, API, body)

    def remove_pool(self, name: str) -> None:
        self._send("DELETE", f"{API}/{quote(name, safe='')}")
