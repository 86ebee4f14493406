"""Who may run their own code: admins always; other users only when granted ``run_code``.

Granting it is the users domain's (``gpufleet users grant NAME run_code``).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.db.models import User


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

