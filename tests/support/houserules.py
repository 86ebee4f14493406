"""The checks behind the house rules (tests/test_layers.py), on any tree shaped like ``backend/gpufleet``.

Each function takes the source it judges (a package folder, a file's text), so the rules' own tests
(tests/test_house_rules.py) hand them a made-up package and see each rule fail.

An import is every way a module loads another: ``import`` statements (inside functions too),
``import_module``/``__import__``/``resolve_name``/``run_module`` with a string the checker can read
(``"gpufleet." + "jobs.worker"`` included), an attribute of a module (``gpufleet.wire.TrainingPublic``,
``getattr(gpufleet, "x")``) and the names a module loads on first use: its ``__getattr__``'s branches
(``if name == "x": from gpufleet.y import x``) and its tables of names (``wire.HOMES``: a module and the
names it holds). A load the checker cannot read (a string built at run time) is a finding of
``dynamic_imports`` unless it is in the short allow-list of the caller.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "backend" / "gpufleet"
FACADE = "gpufleet"
# The calls that load a module named by a string, and the modules they come from.
LOADERS = {"import_module": "importlib", "__import__": "builtins", "resolve_name": "pkgutil",
           "run_module": "runpy"}


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package folder ``package``, by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _from_base(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names, its dots resolved against ``name``."""
    if not node.level:
        return node.module or ""
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    here = here[: len(here) - node.level + 1]
    return ".".join(here + ([node.module] if node.module else []))


def module_of(target: str, known: dict[str, Path] | set[str]) -> str | None:
    """The module ``target`` names or lies in: ``gpufleet.x.y.Name`` -> ``gpufleet.x.y``; None outside gpufleet."""
    while target:
        if target in known:
            return target
        target = target.rpartition(".")[0]
        if target == FACADE:
            return None
    return None


def bindings(name: str, path: Path, tree: ast.AST, known: dict[str, Path]) -> dict[str, str]:
    """The local names a file binds to a gpufleet module (``import gpufleet.x as m``, ``from gpufleet import x``)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in known:
                    out[alias.asname] = alias.name
                elif not alias.asname and alias.name.split(".")[0] in known:
                    out[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(name, path, node)
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    out[alias.asname or alias.name] = f"{base}.{alias.name}"
    return out


def folded(node: ast.expr | None) -> str | None:
    """The string an expression always evaluates to, where it is built of constants only."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = folded(node.left), folded(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [folded(v.value if isinstance(v, ast.FormattedValue) else v) for v in node.values]
        return None if None in parts else "".join(parts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join" \
            and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple)):
        sep, parts = folded(node.func.value), [folded(e) for e in node.args[0].elts]
        return None if sep is None or None in parts else sep.join(parts)
    return None


def _prefix(node: ast.expr) -> str:
    """The constant start of a string built at run time (``f"gpufleet.commands.{name}"``: ``gpufleet.commands.``)."""
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return folded(node.left) or _prefix(node.left)
    return ""


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None for anything but names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


class File:
    """One module's parsed source with what the rules need of it: its bound modules and its loader names."""

    def __init__(self, name: str, path: Path, known: dict[str, Path], source: str | None = None) -> None:
        self.name, self.path, self.known = name, path, known
        self.tree = ast.parse(path.read_text() if source is None else source)
        self.bound = bindings(name, path, self.tree, known)
        self.loaders = self._loader_names()
        self.parents = {child: parent for parent in ast.walk(self.tree) for child in ast.iter_child_nodes(parent)}

    def _loader_names(self) -> set[str]:
        """Local names of the loading calls: ``import_module``, ``from importlib import import_module as load``."""
        out = {"__import__"}
        self.loader_modules = set(LOADERS.values()) | {  # import importlib as il
            alias.asname for node in ast.walk(self.tree) if isinstance(node, ast.Import)
            for alias in node.names if alias.asname and alias.name in LOADERS.values()}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module in LOADERS.values():
                out |= {alias.asname or alias.name for alias in node.names if alias.name in LOADERS}
        for node in ast.walk(self.tree):  # load = importlib.import_module
            if isinstance(node, ast.Assign) and self.is_loader(node.value, out):
                out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        return out

    def is_loader(self, node: ast.expr, names: set[str] | None = None) -> bool:
        names = self.loaders if names is None else names
        if isinstance(node, ast.Name):
            return node.id in names
        return isinstance(node, ast.Attribute) and node.attr in LOADERS and (
            _chain(node.value) or [""])[0] in self.loader_modules

    def resolve(self, node: ast.expr) -> tuple[str | None, list[str]]:
        """The deepest gpufleet module an attribute chain reaches, and the names after it."""
        parts = _chain(node)
        if not parts or parts[0] not in self.bound:
            return None, []
        module, rest = self.bound[parts[0]], parts[1:]
        while rest and f"{module}.{rest[0]}" in self.known:
            module, rest = f"{module}.{rest[0]}", rest[1:]
        return module, rest

    def function_of(self, node: ast.AST) -> str:
        """The qualified name of the function (or class) around ``node``; ``<module>`` at the top."""
        names = []
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
        return ".".join(reversed(names)) or "<module>"

    def loads(self) -> Iterator[tuple[ast.Call, str | None, str]]:
        """Each loading call: the call, the module name it reads (None where built at run time), its start."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and self.is_loader(node.func) and node.args:
                arg = node.args[0]
                target = folded(arg)
                package = folded(node.args[1]) if len(node.args) > 1 else folded(
                    next((k.value for k in node.keywords if k.arg == "package"), None))
                if target and target.startswith("."):  # import_module(".x", "gpufleet.y")
                    target = None if package is None else _relative(target, package)
                if target is not None:
                    target = target.split(":")[0]  # resolve_name("gpufleet.api.app:app")
                yield node, target, _prefix(arg)


def _relative(target: str, package: str) -> str:
    level = len(target) - len(target.lstrip("."))
    base = package.split(".")
    return ".".join(base[: len(base) - level + 1] + [target.lstrip(".")]).rstrip(".")


def lazy_names(known: dict[str, Path]) -> dict[str, dict[str, set[str]]]:
    """For each module with a ``__getattr__``: each name it loads on first use, with the modules it imports."""
    out: dict[str, dict[str, set[str]]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        getattr_ = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"), None)
        if getattr_ is None:
            continue
        file = File(name, path, known)
        table: dict[str, set[str]] = {}
        for branch in ast.walk(getattr_):
            if isinstance(branch, ast.If) and isinstance(branch.test, ast.Compare):
                names = {c.value for c in ast.walk(branch.test.comparators[0]) if isinstance(c, ast.Constant)}
                loads = {t for stmt in branch.body for t in statement_targets(file, stmt)}
                for lazy in names:
                    table.setdefault(lazy, set()).update(loads)
        for lazy, module in _tables(tree, known):
            table.setdefault(lazy, set()).add(module)
        out[name] = table
    return out


def _tables(tree: ast.Module, known: dict[str, Path]) -> Iterator[tuple[str, str]]:
    """The module-level dicts of a module with ``__getattr__`` that map modules to names (``wire.HOMES``) or
    names to modules: each (name, module) pair."""
    for stmt in tree.body:
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        if not isinstance(value, ast.Dict):
            continue
        for key, item in zip(value.keys, value.values):
            key_s = folded(key)
            if key_s in known and isinstance(item, (ast.Tuple, ast.List, ast.Set)):
                yield from ((n, key_s) for e in item.elts if (n := folded(e)) is not None)
            elif key_s is not None and folded(item) in known:
                yield key_s, folded(item)


def statement_targets(file: File, tree: ast.AST) -> set[str]:
    """The modules (or modules' names) ``tree`` imports by a statement or a loading call it can read."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(file.name, file.path, node)
            out |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Call) and file.is_loader(node.func) and node.args:
            target = next((t for call, t, _ in file.loads() if call is node), None)
            out |= {target} if target else set()
    return out


def imports(file: File, lazy: dict[str, dict[str, set[str]]]) -> set[str]:
    """The gpufleet modules ``file`` depends on, in every way listed at the top of this module."""
    targets = statement_targets(file, file.tree)
    for node in ast.walk(file.tree):
        if isinstance(node, ast.ImportFrom):
            base = _from_base(file.name, file.path, node)
            targets |= {t for alias in node.names for t in lazy.get(base, {}).get(alias.name, ())}
        elif isinstance(node, ast.Attribute) and not isinstance(file.parents.get(node), ast.Attribute):
            module, rest = file.resolve(node)
            if module:
                targets |= {module} | (lazy.get(module, {}).get(rest[0], set()) if rest else set())
        elif isinstance(node, ast.Call) and _called(node.func) == "getattr" and len(node.args) >= 2:
            module, rest = file.resolve(node.args[0])
            attr = folded(node.args[1])
            if module and not rest and attr:
                targets |= {module} | (set() if f"{module}.{attr}" not in file.known
                                       else {f"{module}.{attr}"}) | lazy.get(module, {}).get(attr, set())
    for _, target, prefix in file.loads():  # a name built at run time: every module it could be
        if target is None and prefix.startswith(f"{FACADE}."):
            targets |= {m for m in file.known if m.startswith(prefix)}
    targets |= {t for ts in lazy.get(file.name, {}).values() for t in ts}  # its own names loaded on first use
    return {m for t in targets if (m := module_of(t, file.known))} - {file.name}


def _called(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def dynamic_imports(file: File) -> list[str]:
    """Each load whose module the checker cannot read: a loading call on a string built at run time, a
    loader passed on uncalled, ``getattr``/``vars`` of a gpufleet module with a name built at run time."""
    found = []
    for call, target, _ in file.loads():
        if target is None:
            found.append((call, f"{_called(call.func)}({ast.unparse(call.args[0])})"))
    for node in ast.walk(file.tree):
        parent = file.parents.get(node)
        called = isinstance(parent, ast.Call) and parent.func is node
        assigned = isinstance(parent, ast.Assign) and parent.value is node
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load) and file.is_loader(node) \
                and not called and not assigned and not isinstance(parent, ast.Attribute):
            found.append((node, f"{ast.unparse(node)} passed on"))
        if isinstance(node, ast.Call) and _called(node.func) in ("getattr", "vars") and node.args:
            module, rest = file.resolve(node.args[0])
            if module and not rest and (_called(node.func) == "vars" or len(node.args) < 2
                                        or folded(node.args[1]) is None):
                found.append((node, ast.unparse(node)))
        if isinstance(node, ast.Attribute) and node.attr == "__dict__" and file.resolve(node.value)[0] \
                and not file.resolve(node.value)[1]:
            found.append((node, ast.unparse(node)))
    return sorted({f"{file.name}:{file.function_of(node)}: {what}" for node, what in found})


def private_uses(file: File) -> list[str]:
    """Each ``_private`` name of another gpufleet module that ``file`` imports or reads."""
    found = set()
    for node in ast.walk(file.tree):
        if isinstance(node, ast.ImportFrom):
            base = _from_base(file.name, file.path, node)
            if module_of(base, file.known) and base != file.name:
                found |= {f"{file.name}: from {base} import {a.name}" for a in node.names if _is_private(a.name)}
        elif isinstance(node, ast.Attribute):
            module, rest = file.resolve(node)
            if module and module != file.name and rest and _is_private(rest[0]):
                found.add(f"{file.name}: {module}.{rest[0]}")
        if isinstance(node, ast.Call) and _called(node.func) == "getattr" and len(node.args) >= 2:
            module, rest = file.resolve(node.args[0])
            attr = folded(node.args[1])
            if module and module != file.name and not rest and attr and _is_private(attr):
                found.add(f"{file.name}: {module}.{attr}")
    return sorted(found)


def graph(known: dict[str, Path]) -> dict[str, set[str]]:
    lazy = lazy_names(known)
    return {name: imports(File(name, path, known), lazy) for name, path in known.items()}


def _counted(node: ast.AST) -> Iterator[ast.AST]:
    """The syntax nodes under ``node`` (itself included), the load/store markers left out."""
    return (n for n in ast.walk(node) if not isinstance(n, ast.expr_context))


def statements(node: ast.AST) -> int:
    return sum(1 for n in ast.walk(node) if isinstance(n, ast.stmt))


def syntax_nodes(node: ast.AST) -> int:
    return sum(1 for _ in _counted(node))


def long_functions(source: str, lines: int, statement_limit: int, node_limit: int) -> dict[str, int]:
    """Functions (methods, nested ones) longer than ``lines`` lines from ``def`` to their last line, holding
    more than ``statement_limit`` statements (their own ``def`` not counted) or more than ``node_limit``
    syntax nodes, however few lines they take: each with the largest of the three measures it breaks."""
    out = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n, s, k = node.end_lineno - node.lineno + 1, statements(node) - 1, syntax_nodes(node)
            broken = [m for m, limit in ((n, lines), (s, statement_limit), (k, node_limit)) if m > limit]
            if broken:
                out[node.name] = max(broken)
    return out
