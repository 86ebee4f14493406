"""YAML the CLI and the server read is bounded: a bomb, deep nesting or a huge file is a clear error, at once.

The files are the hostile ones a person could be handed: a "billion laughs"
of aliases of aliases (a few hundred bytes that stand for 10^9 values), a
list nested 10,000 deep (PyYAML's composer recurses: a RecursionError), a
recursive alias, and a file past the size bound. Each is refused by
``yamltext.load`` on the parser's events, and `gpufleet sweep start` and
`gpufleet train --config` say what is wrong in one line, with no traceback.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml

from gpufleet import yamltext
from support.servers import gpufleet, serve_env


def _laughs(levels: int = 9, width: int = 9) -> str:
    lines = ["lol: &l0 [" + ", ".join(['"lol"'] * width) + "]"]
    for n in range(1, levels):
        lines.append(f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * width) + "]")
    return "\n".join(lines) + f"\nname: *l{levels - 1}\n"


HOSTILE = {
    "billion laughs": (_laughs(), "once its aliases are expanded"),
    "deep nesting": ("name: " + "[" * 10_000 + "]" * 10_000 + "\n", "nests deeper than 64 levels"),
    "recursive alias": ("name: &a [1, *a]\n", "recursive alias"),
    "too large": ("name: x\n" + "#" * (yamltext.MAX_CHARS + 1), "at most"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_yaml_is_refused_quickly(case: str) -> None:
    text, words = HOSTILE[case]
    started = time.monotonic()
    with pytest.raises(yaml.YAMLError, match=words):
        yamltext.load(text)
    assert time.monotonic() - started < 5


def test_ordinary_yaml_reads_as_before() -> None:
    text = "base: &b {lr: 3e-4, steps: 10}\nrun: *b\nlist: [[1, 2], [3, {a: b}]]\n"
    assert yamltext.load(text) == {"base": {"lr": 3e-4, "steps": 10}, "run": {"lr": 3e-4, "steps": 10},
                                   "list": [[1, 2], [3, {"a": "b"}]]}
    # A wide but honest file: many values, few aliases.
    assert len(yamltext.load("v: [" + ", ".join(str(i) for i in range(50_000)) + "]\n")["v"]) == 50_000


@pytest.mark.parametrize(("case", "args"), [("billion laughs", ["sweep", "start"]),
                                          ("deep nesting", ["train", "--recipe", "mlp", "--no-follow", "--config"])])
def test_the_cli_says_what_is_wrong_in_one_line(case: str, args: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(HOSTILE[case][0])
    env = serve_env(tmp_path / "data", GPUFLEET_SERVER="http://127.0.0.1:9")
    r = subprocess.run([*gpufleet(), *args, str(bad)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode != 0 and HOSTILE[case][1] in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr, r.stderr[-2000:]
