"""``python -m gpufleet.trainings.warm_launch --parent-fd N``: a warm launcher (``engine/warm.py``)
that becomes a recipe's launcher or a script's, whichever training it is handed.

The warm process itself (the imports, the rank server, the job read from
stdin) is ``engine/warm.py``; the script launcher sits above it
(``trainings/script_launch.py``), so this entry point, at the layer of both,
gives it to the warm process to become. A script's
ranks fork from the rank server where they can (``trainings/script_warm.py``).
"""

from __future__ import annotations

import sys

from gpufleet.engine import warm


def script(spec_path: str, rank_server: bool) -> int:
    from gpufleet.trainings import script_launch, script_warm

    if rank_server:
        script_warm.use_rank_server()
    return script_launch.main([spec_path])


def main(argv: list[str] | None = None) -> int:
    return warm.main(argv, {warm.SCRIPT_MODULE: script})


if __name__ == "__main__":
    from gpufleet.trainings.warm_launch import main as _main  # not as __main__: the ranks' forks import it again

    sys.exit(_main())
