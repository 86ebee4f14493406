"""The kinds of work (a recipe training, a member's script, an interactive session), described once at the
bottom of the house so that every layer can ask instead of testing ``kind == ...``.

A :class:`Kind` says what a kind *is*: what a person calls one, whether it runs a member's own code, whether
the team's idle reclaim watches it, whether it lists among the trainings, which places take it, and what its
request may ask for. What a kind *does* belongs to the layer that does it and hangs off the same name: the
worker's :class:`gpufleet.jobs.kinds.WorkKind`, a pool's ``gpufleet.pools.submit.OnPool``, and the request
steps the trainings layer fills into a :class:`Hooks` slot. A new kind is one :func:`describe` here and one
class in each of those registries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

# The places a training runs, by the name of their kind: the team's own hosts, and a pool's kind
# (``db.pools.Pool.kind``).
HOST = "host"
SLURM = "slurm"


@dataclass(frozen=True)
class Kind:
    """What one kind of work is, as every layer may read it."""

    name: str
    noun: str  # what a person calls one in a sentence: "training", "session"
    # Runs a member's own code: its request needs the right to run code, and a worker that cannot switch
    # accounts refuses it (gpufleet.jobs.isolation).
    runs_member_code: bool
    # Its row's ``recipe`` names a recipe shipped with gpufleet (or a plugin), whose config it carries.
    runs_recipe: bool
    # The team's idle reclaim (gpufleet.scheduling.idle) watches its GPUs; a session has its own watch.
    idle_reclaim: bool
    # Listed among the trainings unless sessions are asked for (a session is listed under /sessions).
    lists_as_training: bool
    # Where it may run: place kind names (HOST, SLURM).
    places: frozenset[str]
    # One run across several hosts (a gang).
    spans_hosts: bool
    # Its ranks may sit on GPUs of several vendors (one gloo group, engine/parallel.py).
    mixes_vendors: bool


class UnknownKind(ValueError):
    """A name no kind of work has."""


_KINDS: dict[str, Kind] = {}


def describe(kind: Kind) -> Kind:
    """Make ``kind`` the description of rows of ``kind.name``."""
    _KINDS[kind.name] = kind
    return kind


def forget(name: str) -> None:
    """Take a kind's description away (with every hook filled for it)."""
    _KINDS.pop(name, None)
    for slot in Hooks.slots:
        slot.drop(name)


def of(name: str) -> Kind:
    """The description of rows of kind ``name``."""
    try:
        return _KINDS[name]
    except KeyError:
        raise UnknownKind(f"no kind of work is named {name!r}; known: {', '.join(sorted(_KINDS))}") from None


def names(where: Callable[[Kind], bool] | None = None) -> list[str]:
    """The described kinds' names, sorted; only those ``where`` holds for when given."""
    return sorted(n for n, k in _KINDS.items() if where is None or where(k))


def noun(name: str | None) -> str:
    """What a person calls a row of kind ``name``; "training" for a name no kind has (an old row, a client
    that did not say)."""
    found = _KINDS.get(name) if name else None
    return found.noun if found else "training"


F = TypeVar("F")


class Hooks(Generic[F]):
    """One step that differs by kind, filled in by the layer that does it: one entry per kind name.

    ``PREPARE = Hooks("what a request of it makes")`` in the layer; ``@PREPARE.add("script")`` on each
    kind's function; ``PREPARE.of(req.kind)(...)`` where the step runs. Only a described kind takes one.
    """

    slots: ClassVar[list[Hooks]] = []  # every slot, so forgetting a kind empties its hooks too

    def __init__(self, what: str) -> None:
        self.what = what
        self._by: dict[str, F] = {}
        Hooks.slots.append(self)

    def add(self, name: str) -> Callable[[F], F]:
        of(name)  # refuses a name with no description

        def fill(hook: F) -> F:
            self._by[name] = hook
            return hook

        return fill

    def of(self, name: str) -> F:
        try:
            return self._by[name]
        except KeyError:
            raise UnknownKind(f"a {noun(name)} of kind {name!r} has no {self.what}; "
                              f"the kinds that have one: {', '.join(sorted(self._by))}") from None

    def get(self, name: str) -> F | None:
        return self._by.get(name)

    def filled(self) -> list[str]:
        return sorted(self._by)

    def drop(self, name: str) -> None:
        self._by.pop(name, None)


for _kind in (
    Kind("recipe", noun="training", runs_member_code=False, runs_recipe=True, idle_reclaim=True,
         lists_as_training=True, places=frozenset({HOST, SLURM}), spans_hosts=True, mixes_vendors=True),
    Kind("script", noun="training", runs_member_code=True, runs_recipe=False, idle_reclaim=True,
         lists_as_training=True, places=frozenset({HOST, SLURM}), spans_hosts=False, mixes_vendors=False),
    Kind("session", noun="session", runs_member_code=True, runs_recipe=False, idle_reclaim=False,
         lists_as_training=False, places=frozenset({HOST}), spans_hosts=False, mixes_vendors=False),
):
    describe(_kind)
