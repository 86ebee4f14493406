"""What a warm launcher and its rank server import ahead of a training (``engine/warm.py``).

Apart from ``engine/warm.py`` on purpose: a rank forked from the rank server
runs the launcher's main module (``gpufleet.engine.warm``) afresh as
``__mp_main__``, as multiprocessing does, and Python warns when that module
was already imported there; the server imports this module, never that one.
"""

from __future__ import annotations


def preload() -> None:
    """Import what a recipe training's first step needs, without touching a GPU."""
    from importlib.metadata import entry_points

    import torch  # noqa: F401

    import gpufleet.engine.launch
    import gpufleet.engine.trainer  # noqa: F401
    from gpufleet.engine.recipes import ENTRY_POINT_GROUP, get_recipe

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            get_recipe(ep.name)
        except Exception:  # noqa: BLE001 - a broken recipe fails its own trainings, as it does cold
            continue


def cuda_initialised() -> bool:
    import torch

    return bool(torch.cuda.is_initialized())

