"""Environment builds: gpufleet's uv path against ``python -m venv`` + ``pip``, and the cache hit, in one run.

The same requirements (a wheelhouse written here: ``--packages`` pure-Python
wheels of ``--modules`` modules each, every one depending on the next, so
both installers resolve a chain) are installed four ways, each into a fresh
environment on top of this interpreter (``--system-site-packages``), with no
network (``--no-index --find-links``):

- ``pip``: ``python -m venv --system-site-packages`` then ``pip install -r`` (the baseline);
- ``uv cold``: gpufleet's build (``gpufleet.trainings.venv.Build``: uv venv +
  uv pip install, torch's family excluded) with an empty uv cache;
- ``uv warm``: the same with uv's cache filled (a new key: another host-level
  environment, the wheels already unpacked once);
- ``cache hit``: the same key again, as a second training of the same code sees it.

    python bench/env_build.py [--rounds 3] [--packages 40] [--modules 40]

Medians of the rounds are printed with the ratios to pip.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uv

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.wheels import make_wheel

from gpufleet.engine.progress import ProgressWriter
from gpufleet.trainings import venv


def wheelhouse(root: Path, packages: int, modules: int) -> list[str]:
    names = [f"benchdep-{i:03d}" for i in range(packages)]
    body = "def f(x):\n    return x * 2\n" * 40
    for i, name in enumerate(names):
        mods = {"__init__.py": "VERSION = '1.0'\n", **{f"m{j}.py": body for j in range(modules)}}
        make_wheel(root, name, "1.0", mods, requires=[names[i + 1]] if i + 1 < len(names) else [])
    return names


def with_pip(tmp: Path, house: Path, reqs: Path) -> float:
    target = tmp / f"pip-{time.monotonic_ns()}"
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(target)], check=True)
    subprocess.run([str(target / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-index", "--find-links", str(house), "-r", str(reqs)], check=True)
    return time.perf_counter() - began


def with_uv(tmp: Path, house: Path, work: Path, cache: Path, uv_cache: Path) -> float:
    os.environ["UV_CACHE_DIR"] = str(uv_cache)
    req = venv.EnvRequest(requirements="requirements.txt", python=sys.executable, cache_dir=str(cache),
                          max_bytes=100 * 2**30, uv=uv.find_uv_bin(), find_links=[str(house)], no_index=True)
    build = venv.Build(req, work, ProgressWriter(tmp / "progress.jsonl"), lambda: False)
    began = time.perf_counter()
    build.run()
    took = time.perf_counter() - began
    build.slot.release()  # type: ignore[union-attr]
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--packages", type=int, default=40)
    ap.add_argument("--modules", type=int, default=40)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"pip": [], "uv cold": [], "uv warm": [], "cache hit": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        house = tmp / "wheels"
        names = wheelhouse(house, args.packages, args.modules)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the builds' own log lines
        for r in range(args.rounds):
            work = tmp / f"work-{r}"
            work.mkdir()
            (work / "requirements.txt").write_text(f"# round {r}\n" + "".join(f"{n}\n" for n in names))
            times["pip"].append(with_pip(tmp, house, work / "requirements.txt"))
            times["uv cold"].append(with_uv(tmp, house, work, tmp / f"envs-{r}", tmp / f"uv-cache-{r}"))
            (work / "requirements.txt").write_text(f"# round {r} again\n" + "".join(f"{n}\n" for n in names))
            times["uv warm"].append(with_uv(tmp, house, work, tmp / f"envs-{r}", tmp / f"uv-cache-{r}"))
            times["cache hit"].append(with_uv(tmp, house, work, tmp / f"envs-{r}", tmp / f"uv-cache-{r}"))
        sys.stdout = sys.__stdout__
    pip = statistics.median(times["pip"])
    print(f"{args.packages} packages x {args.modules} modules, {args.rounds} rounds, medians:")
    for name, values in times.items():
        m = statistics.median(values)
        print(f"  {name:10s} {m:8.3f} s   pip / this = {pip / m:7.1f}x   ({', '.join(f'{v:.3f}' for v in values)})")


if __name__ == "__main__":
    main()
