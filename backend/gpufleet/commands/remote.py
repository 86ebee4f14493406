"""The command line's client of a server: the library's client, with a refusal ending the command in one line.

Imported by the commands that talk to a server when they run, not when the
CLI starts: it loads httpx and the API's schemas.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

import typer

from gpufleet.client import Client as _LibraryClient
from gpufleet.client import AmbiguousTraining, GpufleetError, NoAnswer, ServerUnreachable, UnknownTraining
from gpufleet.commands.tables import labelled, make_console

err = make_console(stderr=True)


# The command that shows whether a change under an API path was done (its first part after /api/v1/).
CHECK_WITH = {"pools": "gpufleet pools ls", "trainings": "gpufleet trainings ls", "sessions": "gpufleet session ls",
              "sweeps": "gpufleet sweep ls", "users": "gpufleet users ls", "tokens": "gpufleet tokens ls",
              "groups": "gpufleet groups ls", "webhooks": "gpufleet webhooks ls",
              "bookings": "gpufleet bookings ls"}


def unanswered(exc: NoAnswer) -> str:
    """What to tell of a request that reached the server and got no answer: a change may have been done."""
    if not exc.may_have_been_done:
        return f"{exc}; it may be busy: try again, or look at its log"
    part = exc.path.split("?", 1)[0].removeprefix("/api/v1/").split("/", 1)[0]
    check = f"`{CHECK_WITH[part]}`" if part in CHECK_WITH else "the dashboard or the matching `ls` command"
    return f"{exc}; it may have been done: check with {check} before sending it again"


def fail(message: str) -> NoReturn:
    err.print(labelled("error:", message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


class Client(_LibraryClient):
    """The library's client (one HTTP path for the CLI and Python users); a refusal ends the command with one line."""

    # The API's field names a command's own options stand for: a refusal then names the options,
    # never fields the person did not type (e.g. {"gpu_ids": "--gpu-ids"}). Set by the command.
    options: dict[str, str] = {}
    _lenient = False  # a refusal is raised, not printed (optional)

    def __init__(self, server: str | None):
        try:
            super().__init__(server)
        except ValueError as exc:
            fail(str(exc))
        self.base = self.server

    def _send(self, method: str, path: str, **kw: Any) -> Any:
        try:
            return super()._send(method, path, **kw)
        except NoAnswer as exc:
            fail(unanswered(exc))
        except ServerUnreachable as exc:
            fail(f"{exc}; start it with `gpufleet serve` or pass --server")
        except GpufleetError as exc:
            if self._lenient:
                raise
            fail(self.in_options(str(exc)))

    def optional(self, call: Any, *args: Any, **kw: Any) -> Any:
        """``call(*args, **kw)``'s answer, or None when the server refuses it (a check it makes again anyway)."""
        self._lenient = True
        try:
            return call(*args, **kw)
        except GpufleetError:
            return None
        finally:
            self._lenient = False

    def in_options(self, message: str) -> str:
        """``message`` with the API's field names as this command's options. A name with an underscore
        (``world_size``) is a field wherever it stands; a plain word (``host``) only where the message
        names a field (``body.host``, or ``host:`` leading it), since it is also a word of the prose."""
        if not self.options:
            return message
        named = "|".join(map(re.escape, (f for f in self.options if "_" in f)))
        plain = "|".join(map(re.escape, (f for f in self.options if "_" not in f)))
        pattern = "|".join(p for p in (
            rf"\b(?:body\.)?(?P<named>{named})\b" if named else "",
            rf"\bbody\.(?P<field>{plain})\b|^(?P<lead>{plain})(?=:)" if plain else "") if p)
        return re.sub(pattern, lambda m: self.options[m.group("named") or m.group("field") or m.group("lead")]
                      if m.lastgroup else m.group(0), message)

    def training_id(self, training: Any, option: str | None = None) -> str:
        """The full ID; a refusal names ``option`` (``--from``) when the reference came from one."""
        try:
            return super().training_id(training)
        except (UnknownTraining, AmbiguousTraining) as exc:
            fail(f"{option} {training}: {exc}" if option else str(exc))

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """The JSON answer of any API call, through the same path (for commands without a typed method)."""
        return self.request(method, path, **kw)
