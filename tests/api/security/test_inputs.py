"""Inputs never become code: pickles do not run, nothing reaches a shell.

The data loader is fed a .pt file whose pickle would run a command when
loaded without ``weights_only``; it must refuse it without running it. The
source checks keep the rules from eroding: every ``torch.load`` in the
package says ``weights_only=True`` and no code runs a shell.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
import torch

import gpufleet
from gpufleet.engine.data import BadDataError, load_arrays

PACKAGE = Path(gpufleet.__file__).resolve().parent


class _Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_a_pickle_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({"x": torch.zeros(2), "payload": _Exploit(marker)}, evil)
    with pytest.raises(BadDataError, match="cannot read evil.pt"):
        load_arrays(evil)
    assert not marker.exists()


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return f"{_name(func.value)}.{func.attr}"
    if isinstance(func, ast.Name):
        return func.id
    return ""


def test_every_torch_load_is_weights_only_and_nothing_runs_a_shell() -> None:
    loads, problems = 0, []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for call in _calls(tree):
            name = _name(call.func)
            where = f"{path.relative_to(PACKAGE)}:{call.lineno}"
            kwargs = {k.arg: k.value for k in call.keywords}
            if name == "torch.load":
                loads += 1
                flag = kwargs.get("weights_only")
                if not (isinstance(flag, ast.Constant) and flag.value is True):
                    problems.append(f"{where}: torch.load without weights_only=True")
            if name in ("os.system", "os.popen", "pickle.load", "pickle.loads", "eval", "exec"):
                problems.append(f"{where}: {name}")
            shell = kwargs.get("shell")
            if isinstance(shell, ast.Constant) and shell.value is True:
                problems.append(f"{where}: shell=True")
            if name in ("np.load", "numpy.load"):
                pickle_flag = kwargs.get("allow_pickle")
                if isinstance(pickle_flag, ast.Constant) and pickle_flag.value is True:
                    problems.append(f"{where}: np.load(allow_pickle=True)")
    assert loads >= 2, "expected the data loader and the checkpoint loader"
    assert not problems, problems


def test_nul_characters_are_refused_before_any_route(client, people) -> None:
    from support.people import bearer

    h = bearer(people.alice)
    r = client.get("/api/v1/page?limit=5&x=%00", headers=h)
    assert r.status_code == 422 and "query string" in r.json()["detail"]
    r = client.post("/api/v1/echo", content=b'{"name": "a\\u0000b"}', headers={**h, "Content-Type": "application/json"})
    assert r.status_code == 422 and "body" in r.json()["detail"]
    r = client.post("/api/v1/things/batch", content=b'{"items": [{"\\u0000": 1}]}',
                    headers={**h, "Content-Type": "application/json"})
    assert r.status_code == 422
    assert client.app.state.created == []
    # The six characters \u0000 written out (an escaped backslash) are text, not NUL.
    r = client.post("/api/v1/echo", content=b'{"a": "\\\\u0000", "b": 2}',
                    headers={**h, "Content-Type": "application/json"})
    assert r.status_code == 200 and r.json() == {"keys": 2}
    # A body read in pieces arrives whole after the check.
    def chunks():
        yield b'{"a": 1, '
        yield b'"b": 2, "c": 3}'

    r = client.post("/api/v1/echo", content=chunks(), headers={**h, "Content-Type": "application/json"})
    assert r.status_code == 200 and r.json() == {"keys": 3}
