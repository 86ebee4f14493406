"""YAML read as people write it: ``lr: 3e-4`` is a number.

PyYAML follows YAML 1.1, whose floats need a dot (``3.0e-4``), so ``3e-4``
reads as the string ``"3e-4"`` and a config field or a sweep range then
refuses it as "not a number". YAML 1.2, and the other readers people know
(ruamel, Go's and JavaScript's), read it as a float; gpufleet does too, in
every file it reads: configs, sweep files and ``GPUFLEET_CONFIG``.

Every text is bounded before it is built into objects: its size, its depth of
nesting, and the number of values it stands for once its aliases are expanded
(a "billion laughs" file is a few hundred bytes of aliases of aliases). The
bounds are checked on the parser's events, which never recurse, so a file
past them is a :class:`YAMLTooLarge` (a ``yaml.YAMLError``, caught where YAML
errors are) instead of a hang or a ``RecursionError``.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

# A decimal with an exponent and no dot (those with a dot YAML 1.1 reads already).
_EXPONENT_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$")


class _Loader(yaml.SafeLoader):
    """The safe loader, plus YAML 1.2's exponent floats."""


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789"))


MAX_CHARS = 4 * 1024 * 1024
MAX_DEPTH = 64
MAX_VALUES = 200_000  # scalars, lists and mappings, each alias counted as all it stands for


class YAMLTooLarge(yaml.YAMLError):
    """A YAML text past the bounds; the message says which."""


def _check_bounds(text: str) -> None:
    if len(text) > MAX_CHARS:
        raise YAMLTooLarge(f"the YAML text is {len(text)} characters; at most {MAX_CHARS} are read")
    open_nodes: list[list[Any]] = []  # [anchor, values inside] per open list or mapping
    sizes: dict[str, int] = {}  # what each finished anchor stands for
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(open_nodes) >= MAX_DEPTH:
                raise YAMLTooLarge(f"the YAML nests deeper than {MAX_DEPTH} levels (line {event.start_mark.line + 1})")
            open_nodes.append([event.anchor, 1])
            continue
        if isinstance(event, yaml.AliasEvent):
            if event.anchor not in sizes:
                raise YAMLTooLarge(f"alias *{event.anchor} refers to a value that contains it (a recursive alias)")
            count = sizes[event.anchor]
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, count = open_nodes.pop()
            if anchor is not None:
                sizes[anchor] = count
        elif isinstance(event, yaml.ScalarEvent):
            count = 1
            if event.anchor is not None:
                sizes[event.anchor] = 1
        else:
            continue
        if open_nodes:
            open_nodes[-1][1] += count
            if open_nodes[-1][1] > MAX_VALUES:
                raise YAMLTooLarge(f"the YAML stands for more than {MAX_VALUES} values once its aliases are "
                                   f"expanded (line {event.start_mark.line + 1}); write fewer values, or fewer aliases")


def load(text: str) -> Any:
    """Parse ``text`` like ``yaml.safe_load`` (same errors, and :class:`YAMLTooLarge`), with ``1e-3`` a float."""
    _check_bounds(text)
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
