"""The client's calls for usage, groups, quotas and code upload (mixed into ``gpufleet.client.Client``)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import quote

from gpufleet import wire

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gpufleet.wire.code import CodePublic, CodeUploadPublic
    from gpufleet.wire.sharing import (
        GroupPublic,
        GroupsPublic,
        UsagePublic,
        UserQuotaPublic,
        UserQuotasPublic,
    )
from gpufleet.client.errors import InvalidRequest, NotFound

API = "/api/v1"
# pydantic is imported by the calls that build a shape, never by the import of the client: a command
# that prints the JSON it gets (`gpufleet trainings ls`) starts without it.
B = TypeVar("B", bound="BaseModel")


def checked(model: type[B], what: str, **fields: Any) -> B:
    """``model(**fields)``, or :class:`InvalidRequest` naming each wrong field (before anything is sent)."""
    from pydantic import ValidationError

    try:
        return model(**fields)
    except ValidationError as exc:
        raise InvalidRequest.from_pydantic(what, exc.errors(include_url=False)) from None


def _seg(name: str) -> str:
    return quote(name, safe="")


class SharingCalls:
    """Usage, groups, quotas and code, over the methods ``Client`` provides (``_get``, ``_post``, ``_send``)."""

    _get: Any
    _post: Any
    _send: Any

    # -- usage ------------------------------------------------------------

    def usage(self, *, by: Literal["user", "group", "training"] = "user", first: str | None = None,
              last: str | None = None) -> UsagePublic:
        """GPU-hours held and used per UTC day and user, group or training, days ``first``..``last`` (YYYY-MM-DD)."""
        return self._get(wire.UsagePublic, f"{API}/usage", by=by, **{"from": first, "to": last})

    # -- groups and quotas --------------------------------------------------

    def groups(self) -> GroupsPublic:
        return self._get(wire.GroupsPublic, f"{API}/groups")

    def create_group(self, name: str) -> GroupPublic:
        return self._post(wire.GroupPublic, f"{API}/groups", checked(wire.GroupCreate, "create_group", name=name))

    def delete_group(self, name: str) -> None:
        self._send("DELETE", f"{API}/groups/{_seg(name)}")

    def add_member(self, group: str, user: str) -> GroupPublic:
        return self._post(wire.GroupPublic, f"{API}/groups/{_seg(group)}/members/{_seg(user)}")

    def remove_member(self, group: str, user: str) -> GroupPublic:
        r = self._send("DELETE", f"{API}/groups/{_seg(group)}/members/{_seg(user)}")
        return wire.GroupPublic.model_validate(r.json())

    def set_group_quota(self, group: str, **limits: Any) -> GroupPublic:
        """``max_gpus=`` and ``gpu_hours_per_week=``; a field left out or None is no limit."""
        body = checked(wire.GroupQuota, "set_group_quota", **limits)
        r = self._send("PUT", f"{API}/groups/{_seg(group)}/quota", json=body.model_dump(mode="json"))
        return wire.GroupPublic.model_validate(r.json())

    def quotas(self) -> UserQuotasPublic:
        """Every user's limits and fair-share weight."""
        return self._get(wire.UserQuotasPublic, f"{API}/quotas")

    def set_user_quota(self, user: str, **limits: Any) -> UserQuotaPublic:
        """``max_gpus=``, ``gpu_hours_per_week=`` and ``share=``; a limit left out or None is no limit."""
        body = checked(wire.UserQuota, "set_user_quota", **limits)
        r = self._send("PUT", f"{API}/users/{_seg(user)}/quota", json=body.model_dump(mode="json"))
        return wire.UserQuotaPublic.model_validate(r.json())

    # -- code ---------------------------------------------------------------

    def code(self, code_hash: str) -> CodePublic | None:
        """What the server holds under this hash, or None."""
        try:
            return self._get(wire.CodePublic, f"{API}/code/{_seg(code_hash)}")
        except NotFound:
            return None

    def upload_code(self, archive: bytes | str | Path) -> CodeUploadPublic:
        """Store a .tar.gz of your code (bytes or a path); its ``hash`` goes in ``create_training(code=…)``.

        The same code is stored once: ``created`` is false when the server had it.
        """
        data = Path(archive).read_bytes() if isinstance(archive, (str, Path)) else bytes(archive)
        r = self._send("POST", f"{API}/code", params={"sha256": hashlib.sha256(data).hexdigest()}, content=data,
                       headers={"Content-Type": "application/octet-stream"})
        return wire.CodeUploadPublic.model_validate(r.json())
