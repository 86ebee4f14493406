"""What a user's trainings may ask for beyond the ordinary.

- Their own code (script trainings): admins always; others when granted ``run_code``.
- A priority above 0: admins always; a member up to their cap (their own, else their
  groups' highest, else ``GPUFLEET_MEMBER_MAX_PRIORITY``; see
  :func:`gpufleet.users.groups.priority_cap`).
- ``preemptible: false`` where members' trainings are preemptible by default:
  admins always; others when granted ``non_preemptible``.

The API checks these before creating (``gpufleet.api.deps``), as it does
``run_code``. Granting and capping are the users domain's (``gpufleet users grant NAME
run_code|non_preemptible``, ``gpufleet users set-quota NAME --max-priority N``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import SchedulerSettings
from gpufleet.db.models import User
from gpufleet.wire.training_requests import TrainingCreate
from gpufleet.users.groups import priority_cap


def may_run_code(sess: Session, name: str, role: str) -> tuple[bool, str]:
    if role == "admin":
        return True, f"{name} is an admin"
    if role == "viewer":
        return False, f"user {name!r} has the viewer role, which may only read"
    granted = sess.scalar(select(User.run_code).where(User.name == name, User.disabled.is_(False)))
    if granted:
        return True, f"{name} was granted run_code"
    return False, (f"user {name!r} may not run their own code (script trainings): that needs the run_code "
                   f"permission, which an admin grants with `gpufleet users grant {name} run_code`")


def rank_refusal(sess: Session, settings: SchedulerSettings, reqs: Sequence[TrainingCreate], owner: str,
                 role: str) -> str | None:
    """Why ``owner`` may not ask for these priorities or for no preemption, or None.

    Ordinary requests (priority 0 or below, the server's preemptible default) cost no query.
    """
    if role == "admin":
        return None
    highest = max(r.priority for r in reqs)
    if highest > 0:
        cap = priority_cap(sess, owner, settings.member_max_priority)
        if highest > cap.value:
            return (f"priority {highest} is above {cap.value}, the highest {owner!r} may ask for ({cap.describe()});"
                    f" lower the priority, or ask an admin to raise the cap"
                    f" (`gpufleet users set-quota {owner} --max-priority N`)")
    if settings.preemptible_default and any(r.preemptible is False for r in reqs):
        if not sess.scalar(select(User.non_preemptible).where(User.name == owner)):
            return (f"user {owner!r} may not ask for a training that cannot be preempted (preemptible: false): that"
                    f" needs the non_preemptible permission, which an admin grants with"
                    f" `gpufleet users grant {owner} non_preemptible`")
    return None
