"""YAML read as people write it: ``lr: 3e-4`` is a number.

PyYAML follows YAML 1.1, whose floats need a dot (``3.0e-4``), so ``3e-4``
reads as the string ``"3e-4"`` and a config field or a sweep range then
refuses it as "not a number". YAML 1.2, and the other readers people know
(ruamel, Go's and JavaScript's), read it as a float; gpufleet does too, in
every file it reads: configs, sweep files and ``GPUFLEET_CONFIG``.
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


def load(text: str) -> Any:
    """Parse ``text`` like ``yaml.safe_load`` (same errors), with ``1e-3`` a float."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
