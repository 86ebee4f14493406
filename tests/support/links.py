"""A member's links against the server: a root-only canary file, links to it planted in her folders, and a
process of hers that swaps a name between the real thing and a link to the canary as fast as it can.

The canary is 0600 root's, in a folder only root enters, with known bytes: whatever the server does through
a link the member planted shows as its bytes in what she can read, or as a changed mode, owner or content.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.unix import as_account

# Run as the member by the system's interpreter (the suite's may sit under /root): swap NAME with SPARE,
# atomically (renameat2's RENAME_EXCHANGE), until killed; SPARE starts as the link, NAME as the real thing.
_SWAPPER = r"""
import ctypes, os, sys
name, spare = (os.fsencode(a) for a in sys.argv[1:3])
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
print("swapping", flush=True)
while True:
    libc.renameat2(AT_FDCWD, name, AT_FDCWD, spare, RENAME_EXCHANGE)
"""


@dataclass
class Canary:
    path: Path
    content: bytes

    def assert_untouched(self) -> None:
        st = self.path.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o600), \
            f"the canary's owner or mode changed: {st.st_uid}:{st.st_gid} {oct(st.st_mode)}"
        assert self.path.read_bytes() == self.content, "the canary's content changed"

    def assert_not_in(self, data: bytes | str, where: str) -> None:
        text = data.encode() if isinstance(data, str) else data
        assert self.content.strip() not in text, f"the canary's bytes reached {where}"


@contextmanager
def canary_file(folder: Path) -> Iterator[Canary]:
    """A root-only canary in ``folder`` (made 0700), removed afterwards."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    path = folder / "canary"
    content = f"CANARY-{os.urandom(8).hex()}\n".encode()
    path.write_bytes(content)
    os.chown(path, 0, 0)
    path.chmod(0o600)
    yield Canary(path, content)


def plant(member: pwd.struct_passwd, at: Path, target: Path) -> None:
    """As the member: whatever is at ``at`` replaced with a link to ``target``."""
    done = as_account(member, "sh", "-c", 'rm -rf -- "$1" && ln -s -- "$2" "$1"', "sh", str(at), str(target))
    assert done.returncode == 0, done.stderr


@contextmanager
def swapping(member: pwd.struct_passwd, at: Path, target: Path, *, folder: bool) -> Iterator[None]:
    """As the member, for the block: ``at`` flips between a real folder (or an empty regular file) and a
    link to ``target``, atomically, in a tight loop."""
    spare = at.with_name(f".{at.name}.swap")
    kind = "mkdir -p -- \"$1\"" if folder else ": >> \"$1\""
    made = as_account(member, "sh", "-c", f'rm -rf -- "$1" "$2" && {kind} && ln -s -- "$3" "$2"',
                      "sh", str(at), str(spare), str(target))
    assert made.returncode == 0, made.stderr
    proc = subprocess.Popen(["setpriv", f"--reuid={member.pw_uid}", f"--regid={member.pw_gid}", "--clear-groups",
                             "--", "/usr/bin/python3", "-c", _SWAPPER, str(at), str(spare)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"swapping\n", proc.stderr
        yield
    finally:
        proc.kill()
        proc.wait(timeout=10)
