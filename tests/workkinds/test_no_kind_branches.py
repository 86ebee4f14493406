"""No layer branches on a kind of work's name: it asks the kind's description (gpufleet.workkinds).

Counted by the syntax tree, so a branch cannot hide behind a line break: a comparison (``==``, ``!=``,
``in``, ``not in``, SQL's ``.in_()``, a ``match``) of something named for a kind (``t.kind``,
``Training.kind``, ``training_kind``, ``holder.get("kind")``, ``self.kinds.get(id)``) with the name of a
described kind, written out or held in a module's constant (``KIND = "session"``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import gpufleet
from gpufleet import workkinds

PACKAGE = Path(gpufleet.__file__).parent
REGISTRY = PACKAGE / "workkinds.py"
# The few places left that name one kind on purpose, each saying why beside it (today one:
# commands/preflight.py, `gpufleet run` being the script kind's own command). More is a branch to turn into
# a question to the description (gpufleet.workkinds.of).
MOST = 3


def _named_for_a_kind(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr.lower().rstrip("s").endswith("kind")
    if isinstance(node, ast.Name):
        return node.id.lower().rstrip("s").endswith("kind")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        key = node.args[0] if node.args else None
        return _named_for_a_kind(node.func.value) or (isinstance(key, ast.Constant) and key.value == "kind")
    if isinstance(node, ast.Subscript):
        key = node.slice
        return _named_for_a_kind(node.value) or (isinstance(key, ast.Constant) and key.value == "kind")
    return False


def _strings(node: ast.AST, constants: dict[str, str]) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Name) and node.id in constants:
        return {constants[node.id]}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {s for e in node.elts for s in _strings(e, constants)}
    return set()


def _module_constants(tree: ast.Module) -> dict[str, str]:
    return {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
            for t in n.targets if isinstance(t, ast.Name)}


def kind_branches(source: str, kinds: set[str]) -> list[int]:
    """The lines of ``source`` that compare something named for a kind with one of ``kinds``."""
    tree = ast.parse(source)
    constants = _module_constants(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("in_", "not_in", "notin_"):
            sides = [node.func.value, *node.args]
        elif isinstance(node, ast.Match):
            sides = [node.subject, *(v.value for c in node.cases for v in ast.walk(c.pattern)
                                     if isinstance(v, ast.MatchValue))]
        else:
            continue
        if any(_named_for_a_kind(s) for s in sides) and any(_strings(s, constants) & kinds for s in sides):
            found.append(node.lineno)
    return found


def branches_in(root: Path) -> list[str]:
    kinds = set(workkinds.names())
    return sorted(f"{p.relative_to(root)}:{line}" for p in root.rglob("*.py") if p != REGISTRY
                  for line in kind_branches(p.read_text(), kinds))


def test_at_most_three_comparisons_of_a_kinds_name_remain() -> None:
    found = branches_in(PACKAGE)
    assert len(found) <= MOST, found


def test_the_count_sees_each_way_of_writing_a_branch() -> None:
    kinds = {"recipe", "script", "session"}
    seen = {
        'if t.kind == "script": pass': [1],
        'x = "session" if t.get("kind") == "session" else "training"': [1],
        'ok = kind in ("script", "session")': [1],
        'q = select(T).where(T.kind != "session")': [1],
        'q = select(T).where(T.kind.in_(["recipe"]))': [1],
        'KIND = "session"\nif row.kind != KIND: pass': [2],
        'if training_kind == "session": pass': [1],
        'w = self.kinds.get(tid) == "session"': [1],
        'w = holder["kind"] == "recipe"': [1],
        'match t.kind:\n    case "script":\n        pass': [1],
        # Not branches: another kind of thing (an event's kind), a kind compared with a kind, a table.
        'if e.kind == "status": pass': [],
        'if src.kind != req.kind: pass': [],
        'x = {"session": 1}[t.kind]': [],
    }
    assert {src: kind_branches(src, kinds) for src in seen} == seen
