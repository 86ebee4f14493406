"""A migration file is named for its revision id: ``0010_context.py`` holds revision ``0010_context``.

The revision id (inside the file) is what a database records in ``alembic_version`` and what
``gpufleet db upgrade`` and its errors name, so the file a reader opens for it carries the same
name. Ids were given as steps were written, not in the chain's final order (``0010_context``
comes before ``0009_resume``): the order is ``down_revision``'s, which ``test_the_chain_…`` follows.
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


def misnamed(revisions: dict[str, tuple[str, str | None]]) -> list[str]:
    """Files whose name is not their revision id: the id itself when it has a name part
    (``0010_context``), else the id's number before the file's name (``0001`` in ``0001_initial_schema.py``)."""
    wrong = []
    for name, (rev, _) in sorted(revisions.items()):
        stem = name.removesuffix(".py")
        if stem != rev and not ("_" not in rev and stem.split("_", 1)[0] == rev):
            wrong.append(f"{name} holds revision {rev!r}")
    return wrong


def test_each_file_is_named_for_its_revision_id() -> None:
    assert misnamed(_revisions()) == []


def test_a_file_named_for_another_revision_is_found() -> None:
    # As 0008_context.py held revision 0010_context.
    files = {"0001_initial.py": ("0001", None), "0008_context.py": ("0010_context", "0001"),
             "0009_resume.py": ("0009_resume", "0010_context"), "0003_b.py": ("0004", "0009_resume")}
    assert misnamed(files) == ["0003_b.py holds revision '0004'", "0008_context.py holds revision '0010_context'"]
