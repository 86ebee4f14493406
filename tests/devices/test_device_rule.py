"""The device is one value: only ``gpufleet/devices/`` names the GPU visibility variables or joins GPU numbers.

A new kind of device (a MIG instance named by its UUID, a share of a GPU's
memory) is then one change in ``devices/device.py``, not an edit in every
launcher. The scan reads code, not prose: a docstring may explain what
``CUDA_VISIBLE_DEVICES`` does.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import gpufleet

PACKAGE = Path(gpufleet.__file__).parent
OWNER = "devices"
# The variables that pick or renumber GPUs, and their stems (a prefix test such as "CUDA_VISIBLE" counts too).
VARIABLE = re.compile(r"(CUDA|HIP|ROCR|NVIDIA)_VISIBLE|ZE_AFFINITY_MASK|CUDA_DEVICE_ORDER")
# Joins of numbers that are not GPUs: each by its file and the joined expression, so a GPU join added
# beside one still fails.
NOT_GPUS = {
    ("config/__init__.py", "str(p) for p in err['loc']"),  # a settings error's field path
    ("client/errors.py", "str(x) for x in e.get('loc', ())"),  # a 422's field path
    ("client/errors.py", "str(x) for x in d.get('loc', []) if x not in ('body', 'query', 'path')"),
    ("jobs/sandbox.py", "str(g) for g in sorted(set(groups))"),  # Unix group ids
    ("commands/api_processes.py", "str(p) for p in children"),  # process ids
}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the constant nodes that are docstrings."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _stringified(arg: ast.expr) -> bool:
    """``map(str, xs)``, ``str(x) for x in xs`` or ``f"{x}" for x in xs``: numbers made text one by one."""
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "map" and arg.args:
        return isinstance(arg.args[0], ast.Name) and arg.args[0].id == "str"
    if isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
        elt = arg.elt
        if isinstance(elt, ast.Call) and isinstance(elt.func, ast.Name) and elt.func.id == "str":
            return True
        return (isinstance(elt, ast.JoinedStr) and len(elt.values) == 1
                and isinstance(elt.values[0], ast.FormattedValue) and elt.values[0].format_spec is None)
    return False


def problems(source: str, name: str) -> list[str]:
    """What in ``source`` (the module at ``name``, relative to the package) breaks the rule."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            hit = VARIABLE.search(node.value)
            if hit:
                found.append(f"{name}:{node.lineno} names {hit.group(0)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
              and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)
              and len(node.args) == 1 and _stringified(node.args[0])):
            joined = ast.unparse(node.args[0])
            joined = joined[1:-1] if isinstance(node.args[0], ast.GeneratorExp) else joined
            if (name, joined) not in NOT_GPUS:
                found.append(f"{name}:{node.lineno} joins numbers into text ({joined})")
    return found


def scan(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.split("/")[0] != OWNER:
            found += problems(path.read_text(), name)
    return found


def test_only_devices_names_the_visibility_variables_or_joins_gpu_numbers() -> None:
    # The fix for each: DeviceSet (devices/device.py) for a process's environment or a variable's value,
    # DEVICE_ENV / VISIBILITY for the names, index_list for GPU numbers shown to people.
    assert scan(PACKAGE) == []


def test_the_rule_sees_what_it_is_for() -> None:
    source = '''
"""Sets CUDA_VISIBLE_DEVICES for its ranks."""
def env(gpus, backend):
    """The ranks' CUDA_VISIBLE_DEVICES."""
    names = {"cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK"}
    mine = {k: v for k, v in env.items() if k.startswith("ROCR_VISIBLE")}
    shown = ", ".join(map(str, gpus)) + ",".join(str(i) for i in gpus) + ",".join(f"{g}" for g in gpus)
    fine = ", ".join(f"GPU {g.index}: {w:.2f}" for g, w in gpus) + ",".join(names)
    return {names[backend]: shown, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
'''
    found = problems(source, "engine/x.py")
    assert sorted(f.split(" ", 1)[1] for f in found) == sorted([
        "names CUDA_VISIBLE", "names ZE_AFFINITY_MASK", "names ROCR_VISIBLE", "names CUDA_DEVICE_ORDER",
        "joins numbers into text (map(str, gpus))", "joins numbers into text (str(i) for i in gpus)",
        "joins numbers into text (f'{g}' for g in gpus)",
    ]), found
    # The same join of Unix group ids is allowed where it is listed, and only there.
    groups = 'x = ",".join(str(g) for g in sorted(set(groups)))\n'
    assert problems(groups, "jobs/sandbox.py") == [] and problems(groups, "jobs/other.py") != []
