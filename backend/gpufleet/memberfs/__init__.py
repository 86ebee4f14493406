"""Every file the server touches inside a folder a member can write, touched here and nowhere else.

A member's pool folder, work dirs, checkpoints, outputs, the logs and progress
files of her attempts and her session folders are hers: she can put a link, a
FIFO or a folder anywhere in them, and swap one for another while the server
works. The server runs as root, so a path it resolves there is a path she
chose: a link named like her job's output file made root read ``/etc/shadow``
into her log, and a folder swapped for a link between a check and a ``chmod``
made root change the mode of any file.

So nothing here resolves such a path. A folder the server trusts (the data
dir's roots, a pool's checkpoint root: made by root, writable by root alone)
is opened once by descriptor (:meth:`Dir.root`); everything below it is reached
relative to that descriptor with no link followed at any component
(``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` where the kernel
has it, else ``O_NOFOLLOW`` on each component in turn); modes and owners are
set on the opened descriptor (``fchmod``, ``fchown``), and files are read only
when they are regular files, opened without blocking (a FIFO cannot hang the
server). ``tests/test_memberfs_rule.py`` keeps every other server module off
path-based file calls in these trees.
"""

from gpufleet.memberfs.folder import Dir
from gpufleet.memberfs.paths import folder, give_once, hand_over, in_folder, mark, read_regular, remove, write_new
from gpufleet.memberfs.resolve import READ_LIMIT, NotRegular, beneath, has_openat2, open_beneath

__all__ = ["READ_LIMIT", "Dir", "NotRegular", "beneath", "folder", "give_once", "hand_over", "has_openat2",
           "in_folder", "mark", "open_beneath", "read_regular", "remove", "write_new"]
