"""Pools: places an existing scheduler owns (a Slurm partition). Admins add and remove them; anyone reads."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path

from gpufleet.api.deps import AdminUser, SettingsDep, ViewerUser, ensure_second_step
from gpufleet.api.security.openapi import error_response
from gpufleet.db.pools import Pool
from gpufleet.db.session import session_scope, write_session
from gpufleet.pools import service
from gpufleet.wire.pools import PoolCreate, PoolNode, PoolPublic, PoolsPublic

router = APIRouter(prefix="/api/v1/pools", tags=["pools"])
NamePath = Annotated[str, Path(min_length=1, max_length=63, description="a pool's name")]


def _public(pool: Pool, with_nodes: bool) -> PoolPublic:
    pub = PoolPublic.of(pool)
    if with_nodes:
        try:
            pub.nodes = [PoolNode(name=n.name, state=n.state, gres=n.gres, gres_used=n.gres_used, cpus=n.cpus)
                         for n in service.nodes(pool)]
        except service.PoolError as exc:
            pub.error = str(exc)
    return pub


@router.get("", response_model=PoolsPublic, operation_id="pools-list")
def list_pools(settings: SettingsDep, user: ViewerUser) -> PoolsPublic:
    """Every pool, with its partition's nodes, GPUs and state as Slurm reports them now."""
    with session_scope(settings) as sess:
        pools = [_public(p, True) for p in service.listed(sess)]
    return PoolsPublic(data=pools, count=len(pools))


@router.get("/{name}", response_model=PoolPublic, operation_id="pools-get",
            responses={404: error_response("No such pool")})
def get_pool(name: NamePath, settings: SettingsDep, user: ViewerUser) -> PoolPublic:
    try:
        with session_scope(settings) as sess:
            return _public(service.get(sess, name), True)
    except service.PoolError as exc:
        raise HTTPException(exc.status, str(exc)) from None


@router.post("", response_model=PoolPublic, status_code=201, operation_id="pools-create",
             responses={409: error_response("The name is taken, or the cluster does not answer"),
                        403: error_response("Asked with the browser's sign-in alone: send the token, or use the CLI")})
def create_pool(body: PoolCreate, settings: SettingsDep, user: AdminUser) -> PoolPublic:
    """Add a Slurm partition as a pool (admins only, with the token or the CLI: not the browser's sign-in
    alone); the cluster must answer and have the partition."""
    ensure_second_step(user, "adding a pool")
    spec = service.PoolSpec(name=body.name, kind=body.kind, options=body.options(),
                            gpus_per_node=body.gpus_per_node, gpu_model=body.gpu_model,
                            gpu_memory=body.gpu_memory_mb * 2**20 if body.gpu_memory_mb else None,
                            checkpoint_root=body.checkpoint_root, python=body.python)
    try:
        with write_session(settings) as sess:
            return _public(service.add(sess, settings, spec), False)
    except service.PoolError as exc:
        raise HTTPException(exc.status, str(exc)) from None


@router.delete("/{name}", status_code=204, operation_id="pools-delete",
               responses={404: error_response("No such pool"), 409: error_response("It still has trainings"),
                          403: error_response(
                              "Asked with the browser's sign-in alone: send the token, or use the CLI")})
def delete_pool(name: NamePath, settings: SettingsDep, user: AdminUser) -> None:
    ensure_second_step(user, "removing a pool")
    try:
        with write_session(settings) as sess:
            service.remove(sess, name)
    except service.PoolError as exc:
        raise HTTPException(exc.status, str(exc)) from None
