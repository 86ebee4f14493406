"""The migration files read in their chain's order: the N-th step from the empty schema is file ``000N_*``.

A file's name is its place in the chain; its revision id (inside it) is what a
database records, so renaming a file never changes an existing database's history.
"""

from __future__ import annotations

import ast
from pathlib import Path

VERSIONS = Path(__file__).resolve().parents[2] / "alembic" / "versions"


def _revisions() -> dict[str, tuple[str, str | None]]:
    """File name -> (revision, down_revision), read from each file's assignments."""
    out = {}
    for path in VERSIONS.glob("*.py"):
        values = {t.id: node.value.value for node in ast.parse(path.read_text()).body
                  if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                  for t in node.targets if isinstance(t, ast.Name)}
        out[path.name] = (values["revision"], values.get("down_revision"))
    return out


def _chain(revisions: dict[str, tuple[str, str | None]]) -> list[str]:
    """The file names from the first step to the head, following down_revision."""
    after = {down: name for name, (_, down) in revisions.items()}
    rev_of = {name: rev for name, (rev, _) in revisions.items()}
    chain, down = [], None
    while down in after:
        chain.append(after[down])
        down = rev_of[after[down]]
    return chain


def test_the_chain_is_one_line_through_every_file() -> None:
    revisions = _revisions()
    downs = [down for _, down in revisions.values()]
    assert sorted({d for d in downs if downs.count(d) > 1}, key=str) == [], "two migrations share a parent"
    assert sorted(_chain(revisions)) == sorted(revisions), "a migration is not on the chain from the base"


def test_files_are_numbered_in_the_chains_order() -> None:
    chain = _chain(_revisions())
    assert [name.split("_", 1)[0] for name in chain] == [f"{i:04d}" for i in range(1, len(chain) + 1)]


def test_the_order_check_can_fail() -> None:
    # Numbered out of the chain's order: 0002 comes after 0003.
    crossed = {"0001_a.py": ("a", None), "0003_b.py": ("b", "a"), "0002_c.py": ("c", "b")}
    assert _chain(crossed) == ["0001_a.py", "0003_b.py", "0002_c.py"]
    assert [n.split("_", 1)[0] for n in _chain(crossed)] != ["0001", "0002", "0003"]
