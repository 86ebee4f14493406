"""Root never resolves a path a member controls: the server's modules that work in members' folders (her
pool folder, work dirs, checkpoints, outputs, her attempts' specs, progress and stop files, session folders)
make no path-based file call; every such access goes through gpufleet.memberfs, relative to a directory
descriptor and through no link (tests/pools/test_pool_links.py and tests/jobs/test_planted_links.py plant the
links and race the swaps). A call here that is on a path of the server's own is named in ALLOWED, with why.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "backend" / "gpufleet"

# The server's side (API process, worker, pools' loop) of everything that reads, writes, lists, makes, gives
# or removes something in a member's folders.
MEMBER_TREE_MODULES = [
    "pools/submit.py",          # the pool folder, its spec, batch script, code, stop marker
    "jobs/pool_watch.py",       # the job's slurm-N.out, shipped into the training's log
    "jobs/isolation.py",        # the training's folders handed over at each attempt
    "jobs/metrics_sink.py",     # report files, the newest checkpoint after a resume
    "jobs/earlier_attempts.py",  # the newest step-N folder, rank 0's unmerged reports
    "jobs/checkpoint_found.py",  # the checkpoint a stop's grace left, looked for once the ranks are gone
    "jobs/rung_gate.py",        # a sweep trial's marker that lets its ranks past a rung
    "trainings/progress.py",    # progress files
    "trainings/files.py",       # the Files page: listing and downloads
    "engine/resumepoint.py",    # the newest checkpoint to resume from, a clone's seed
    "engine/stopfile.py",       # the stop marker
    "jobs/kinds.py",            # a recipe's spec and progress file
    "jobs/session_attempt.py",  # a session's spec and progress file
    "trainings/script.py",      # a script's next attempt: its progress and stop files cleared
    "jobs/gang_member.py",      # a follower host's progress file and its last error
    "jobs/supervisor.py",       # the earlier attempts' progress files
    "ckptstore/upload.py",      # a checkpoint's files, read for the object store
    "ckptstore/download.py",    # the store's checkpoint, written into the training's checkpoint folder
    "jobs/ckpt_uploads.py",     # the checkpoint a progress line named, queued for the store
    "jobs/ckpt_restore.py",     # the newest checkpoint on this host, against the store's
    "jobs/ckpt_pools.py",       # a pool training's checkpoint folder, below the pool's root
]

PATH_METHODS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "iterdir", "mkdir", "chmod",
                "lchmod", "unlink", "rmdir", "touch", "rename", "replace", "glob", "rglob", "symlink_to",
                "hardlink_to", "exists", "is_dir", "is_file", "is_symlink", "stat", "lstat", "owner", "samefile"}
OS_CALLS = {"open", "chmod", "lchmod", "chown", "lchown", "rename", "replace", "unlink", "remove", "rmdir",
            "listdir", "scandir", "walk", "fwalk", "makedirs", "mkdir", "symlink", "link", "truncate", "stat",
            "lstat", "utime", "mkfifo", "access"}
OS_PATH_CALLS = {"exists", "lexists", "isfile", "isdir", "islink", "realpath", "getsize", "getmtime", "samefile"}

# (module, function, call): why the call is on a path no member controls.
ALLOWED = {
    ("jobs/isolation.py", "prepare", ".mkdir"):
        "no account switch: the training runs as the server's own account, its folders are the server's",
    ("jobs/isolation.py", "_add_search", ".stat"):
        "the data dir, the checkpoint root, the folder of environment caches: root's own",
    ("jobs/isolation.py", "_add_search", ".chmod"):
        "the data dir, the checkpoint root, the folder of environment caches: root's own",
    ("jobs/isolation.py", "plan", ".exists"):
        "the system's folders and the operator's data root and CA bundle, bound read-only into the sandbox",
    ("jobs/isolation.py", "plan", "os.path.isdir"):
        "the account's home, whose own name sits in /home (root's)",
    ("jobs/gang_member.py", "run_follower", ".read_text"):
        "the rendezvous marker, in the checkpoint root's .gpufleet-shared/ (root's; jobs/rendezvous.py)",
    ("jobs/gang_member.py", "run_follower", ".mkdir"):
        "the run dir's own name, made in the data dir's jobs/ (root's); a link cannot be put there",
    ("pools/submit.py", "waiting", ".exists"):
        "SQLAlchemy's EXISTS over a subquery, no file",
    ("engine/stopfile.py", "stop_requested", "os.path.exists"):
        "runs in the member's rank, as her own account",
    ("engine/resumepoint.py", "seed_from", ".mkdir"):
        "the checkpoint root, the server's, above the clone's folder",
    ("ckptstore/download.py", "_make_folder", ".mkdir"):
        "the checkpoint root, the server's, above the training's folder",
    ("jobs/session_attempt.py", "write_spec", ".mkdir"):
        "the run dir's own name, made in the data dir's jobs/ (root's); a link cannot be put there",
    ("jobs/kinds.py", "_recipe_spec", ".mkdir"):
        "the run dir's own name, made in the data dir's jobs/ (root's); a link cannot be put there",
}


def _calls(tree: ast.AST) -> list[tuple[str, str, int]]:
    """(enclosing function, call, line) for each path-based file call."""
    out = []

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.Call) and (kind := _kind(child.func)):
                out.append((func, kind, child.lineno))
            visit(child, name)

    visit(tree, "<module>")
    return out


def _kind(f: ast.expr) -> str | None:
    if isinstance(f, ast.Name):
        return "open()" if f.id == "open" else None
    if not isinstance(f, ast.Attribute):
        return None
    owner = f.value
    if isinstance(owner, ast.Name) and owner.id == "shutil":
        return f"shutil.{f.attr}"
    if isinstance(owner, ast.Name) and owner.id == "os":
        return f"os.{f.attr}" if f.attr in OS_CALLS else None
    if isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name) and owner.value.id == "os":
        return f"os.path.{f.attr}" if owner.attr == "path" and f.attr in OS_PATH_CALLS else None
    if isinstance(owner, ast.Name) and owner.id in ("memberfs", "json", "re", "str", "tarfile", "io"):
        return None
    if f.attr == "replace" and isinstance(owner, (ast.Constant, ast.JoinedStr)):
        return None
    return f".{f.attr}" if f.attr in PATH_METHODS else None


def _violations() -> list[str]:
    found = []
    for module in MEMBER_TREE_MODULES:
        tree = ast.parse((PACKAGE / module).read_text())
        for func, kind, line in _calls(tree):
            if (module, func, kind) not in ALLOWED:
                found.append(f"{module}:{line} {kind} in {func}()")
    return found


def test_no_path_based_file_call_in_a_members_tree_outside_memberfs() -> None:
    found = _violations()
    assert not found, ("path-based file calls where a member's folders are touched; go through "
                       "gpufleet.memberfs (or name the call in ALLOWED, saying why its path is root's):\n"
                       + "\n".join(found))


def test_the_allow_list_names_only_calls_that_are_there() -> None:
    present = {(m, f, k) for m in MEMBER_TREE_MODULES for f, k, _ in _calls(ast.parse((PACKAGE / m).read_text()))}
    assert set(ALLOWED) <= present, sorted(set(ALLOWED) - present)


def test_the_rule_would_have_caught_the_pools_output_file_read_through_a_link() -> None:
    # What the pools' watch did: Path(job.output).open("rb") on the member's slurm-N.out.
    old = ast.parse('def _ship_output(settings, job):\n    with Path(job.output).open("rb") as fh:\n'
                    '        return fh.read()\n')
    assert _calls(old) == [("_ship_output", ".open", 2)]
    chmod = ast.parse("def _own(path, acct):\n    os.chmod(path, 0o755)\n")
    assert _calls(chmod) == [("_own", "os.chmod", 2)]
