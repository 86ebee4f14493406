"""The kinds of place this server knows, by name (a pool's ``kind``): Slurm's, and any a plugin or a test adds.

A second kind is one :class:`~gpufleet.pools.place.PlaceKind` subclass passed to
:func:`register`; nothing else in gpufleet changes (docs/architecture.md
sketches a Kubernetes one).
"""

from __future__ import annotations

from gpufleet.pools.place import PlaceError, PlaceKind
from gpufleet.pools.slurm_place import SlurmPlace

KINDS: dict[str, PlaceKind] = {}


def register(kind: PlaceKind) -> PlaceKind:
    """Add a kind of place (or replace the one of its name); returns it."""
    KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    KINDS.pop(name, None)


def place_kind(name: str) -> PlaceKind:
    try:
        return KINDS[name]
    except KeyError:
        raise PlaceError(f"no kind of pool {name!r}; this server knows {', '.join(sorted(KINDS)) or 'none'}") \
            from None


register(SlurmPlace())
