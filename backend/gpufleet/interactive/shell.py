"""A shell in a running session: its host, account and environment (``gpufleet session shell``)."""

from __future__ import annotations

import shlex
import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import CodeSettings
from gpufleet.db.models import GPU, GPUAllocation, Host
from gpufleet.devices.device import DeviceSet
from gpufleet.interactive.service import get
from gpufleet.wire.sessions import ShellTarget
from gpufleet.trainings.admission.checks import TrainingRequestError
from gpufleet.users.runas import RunAsError, for_owner


def target(sess: Session, settings: CodeSettings, session_id: uuid.UUID) -> ShellTarget:
    t, _side = get(sess, session_id)
    if t.status != "running":
        raise TrainingRequestError("id", f"session {session_id} is {t.status}, not running; a shell opens in a "
                                         "running session", status=409)
    rows = sess.execute(
        select(Host.name, Host.address, GPU.backend, GPU.backend_device_id)
        .join(GPUAllocation, GPUAllocation.host_id == Host.id)
        .join(GPU, GPU.id == GPUAllocation.gpu_id)
        .where(GPUAllocation.training_id == t.id, GPUAllocation.released_at.is_(None))
        .order_by(GPUAllocation.gpu_index)).all()
    if not rows:
        raise TrainingRequestError("id", f"session {session_id} holds no GPUs right now", status=409)
    host, address, backend = rows[0][0], rows[0][1], rows[0][2]
    try:
        account = for_owner(sess, settings.run_account, t.owner).name
    except RunAsError:
        account = t.owner
    env = {
        **DeviceSet.of(backend, [r[3] for r in rows]).env(),
        "GPUFLEET_SESSION_ID": str(t.id),
        "GPUFLEET_TRAINING_ID": str(t.id),
    }
    login = f"{account}@{address or host}"
    return ShellTarget(id=str(t.id), host=host, host_address=address, account=account, env=env,
                       ssh=f"ssh -t {shlex.quote(login)} gpufleet session shell {t.id}")
