"""Run at every interpreter's start where the launcher put this folder first on ``PYTHONPATH``, which it
does only for work on a share of a GPU: caps PyTorch's allocator before the member's first line
(``gpufleet_share.py``), then runs the ``sitecustomize`` this one hides (a venv's own), if any."""

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_here))
import gpufleet_share  # type: ignore[import-not-found]  # noqa: E402 - the folder above, on the path now

del sys.path[0]
_share = gpufleet_share.share_of(os.environ)
if _share is not None:
    gpufleet_share.cap(_share)
_next = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _next is not None and _next.loader is not None:
    _module = importlib.util.module_from_spec(_next)
    _next.loader.exec_module(_module)
