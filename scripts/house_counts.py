"""The house step's counts for a checkout: what is left of each thing the step removes.

    .venv/bin/python scripts/house_counts.py [CHECKOUT] [--list] [--no-mypy]

(a) mypy errors on backend/gpufleet (``--ignore-missing-imports``; skipped where mypy is not installed),
(b) branches on a training's pool (``Training.pool``, ``pool is None``, ``if t.pool:``) outside pools/,
(c) comparisons of a work kind's name (``kind == "session"``, ``kind in ("recipe", "script")``) outside the
    kind registry (a ``kinds.py`` module),
(d) modules outside devices/ naming a device-visibility variable (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES,
    ZE_AFFINITY_MASK),
(e) functions with a parameter annotated with the whole ``Settings``,
(f) files of 390 lines or more, (g) functions of 70 lines or more.

Everything but (a) reads the source only (``ast``), so it runs on any commit: ``git worktree add /tmp/x REV``.
``--list`` prints each counted place under its figure.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

KIND_NAMES = {"recipe", "script", "session"}
VISIBILITY = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")
LONG_FILE, LONG_FUNCTION = 390, 70


def _sources(package: Path) -> Iterator[tuple[str, str, ast.Module]]:
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        yield str(path.relative_to(package)), text, ast.parse(text)


POOL_FIELDS = {"pool", "pool_name"}


def _place_names(scope: ast.AST) -> set[str]:
    """The local names in ``scope`` that hold a pool (a place to run): a parameter ``pool``, or a name bound from
    ``x.pool`` or from another such name. A warm pool or a connection pool bound from elsewhere is not one."""
    names: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        every = [*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs]
        names = {a.arg for a in every if a.arg in POOL_FIELDS}
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    body = [scope] if not isinstance(scope, ast.Module) else [s for s in scope.body if not isinstance(s, defs)]
    for node in (n for part in body for n in ast.walk(part)):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None \
                and _mentions_pool(node.value, names):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and n.id in POOL_FIELDS}
    return names


def _mentions_pool(node: ast.AST, names: set[str]) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "hasattr":
            return False  # a test of what an object can do (httpx's connection pool), not of where to run
        if (isinstance(n, ast.Attribute) and n.attr in POOL_FIELDS) or (isinstance(n, ast.Name) and n.id in names):
            return True
    return False


def _conditions(tree: ast.Module) -> Iterator[ast.expr]:
    """Tests of if/while/ternary/assert/comprehension, comparisons with None, ``x.is_(None)``-style SQL."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            yield node.test
        elif isinstance(node, ast.comprehension):
            yield from node.ifs
        elif isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value is None
                                                   for c in [node.left, *node.comparators]):
            yield node
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("is_", "isnot", "is_not") and node.args \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value is None:
            yield node.func.value


def pool_branches(rel: str, tree: ast.Module) -> list[str]:
    """Conditions on where a training runs (``Training.pool.is_(None)``, ``if t.pool:``, ``pool is None``)."""
    if rel.startswith("pools/"):
        return []
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    scopes: dict[ast.AST, set[str]] = {}
    found = set()
    for test in _conditions(tree):
        names: set[str] = set()  # of its function and the functions around it (a closure reads theirs)
        node: ast.AST = test
        while node in parents:
            node = parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
                names |= scopes.setdefault(node, _place_names(node))
        if _mentions_pool(test, names):
            found.add((rel, test.lineno))
    return [f"{r}:{n}" for r, n in sorted(found)]


def _is_kind(node: ast.expr) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name == "kind" or name.endswith("_kind")


def _kind_names(node: ast.expr) -> set[str]:
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)} & KIND_NAMES


def kind_comparisons(rel: str, tree: ast.Module) -> list[str]:
    if Path(rel).name == "kinds.py" or "kinds" in Path(rel).parts[:-1]:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_kind(s) for s in sides) and any(_kind_names(s) for s in sides):
                found.append((rel, node.lineno))
    return [f"{r}:{n}" for r, n in sorted(found)]


def visibility_modules(rel: str, text: str) -> list[str]:
    if rel.startswith("devices/"):
        return []
    return [rel] if any(v in text for v in VISIBILITY) else []


def _annotated_settings(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return re.fullmatch(r"\s*(\w+\.)*Settings(\s*\|\s*None)?\s*", annotation.value) is not None
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):  # Settings | None
        return _annotated_settings(annotation.left) or _annotated_settings(annotation.right)
    if isinstance(annotation, ast.Subscript):  # Optional[Settings]
        return _annotated_settings(annotation.slice)
    return (isinstance(annotation, ast.Name) and annotation.id == "Settings") or (
        isinstance(annotation, ast.Attribute) and annotation.attr == "Settings")


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    return (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def settings_takers(rel: str, tree: ast.Module) -> list[str]:
    found = []
    for fn in _functions(tree):
        args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        if any(_annotated_settings(a.annotation) for a in args):
            found.append(f"{rel}:{fn.lineno}:{fn.name}")
    return found


def long_files(rel: str, text: str) -> list[str]:
    n = len(text.splitlines())
    return [f"{rel} ({n})"] if n >= LONG_FILE else []


def long_functions(rel: str, tree: ast.Module) -> list[str]:
    return [f"{rel}:{fn.name} ({n})" for fn in _functions(tree)
            if (n := fn.end_lineno - fn.lineno + 1) >= LONG_FUNCTION]


def mypy_errors(checkout: Path) -> str:
    """mypy's error count on backend/gpufleet, or why there is none."""
    python = checkout / ".venv" / "bin" / "python"
    python = python if python.exists() else Path(sys.executable)
    probe = subprocess.run([str(python), "-c", "import mypy"], capture_output=True)
    if probe.returncode != 0 and not shutil.which("mypy"):
        return "not counted (mypy is not installed)"
    cmd = [str(python), "-m", "mypy"] if probe.returncode == 0 else ["mypy"]
    done = subprocess.run([*cmd, "backend/gpufleet", "--ignore-missing-imports", "--no-error-summary"],
                          cwd=checkout, capture_output=True, text=True)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    return str(len(errors))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", nargs="?", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--list", action="store_true", help="print each counted place")
    parser.add_argument("--no-mypy", action="store_true", help="skip (a), the slow one")
    args = parser.parse_args()
    package = args.checkout / "backend" / "gpufleet"
    if not package.is_dir():
        parser.error(f"{args.checkout} has no backend/gpufleet")
    found: dict[str, list[str]] = {k: [] for k in "bcdefg"}
    for rel, text, tree in _sources(package):
        found["b"] += pool_branches(rel, tree)
        found["c"] += kind_comparisons(rel, tree)
        found["d"] += visibility_modules(rel, text)
        found["e"] += settings_takers(rel, tree)
        found["f"] += long_files(rel, text)
        found["g"] += long_functions(rel, tree)
    titles = {"b": "pool branches outside pools/", "c": "kind-name comparisons outside the kind registry",
              "d": "modules outside devices/ naming a visibility variable",
              "e": "functions taking the whole Settings", "f": f"files of {LONG_FILE}+ lines",
              "g": f"functions of {LONG_FUNCTION}+ lines"}
    print(f"(a) mypy errors: {'skipped' if args.no_mypy else mypy_errors(args.checkout)}", flush=True)
    for key, title in titles.items():
        print(f"({key}) {title}: {len(found[key])}")
        if args.list:
            print("".join(f"      {place}\n" for place in found[key]), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
