"""The dispatch mode that counts a traced step's live storage: ``MemoryTracker``.

Every storage an op creates is counted, rounded up to the CUDA caching allocator's
512-byte blocks as ``torch.cuda.max_memory_allocated`` counts them, until Python frees
it; the peak and what was alive then are kept by category, and from
``start_events()`` on the sequence of allocations and frees that ``allocator.replay``
turns into the reserved peak. It counts what a GPU does where the CPU trace differs:
autograd's in-place sum of gradients, the cuBLAS workspaces' places, and the scratch
of CUDA's reduction kernels (``cuda_kernels``). ``memtrace`` runs it over a step.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from gpufleet.scheduling.cuda_kernels import reduction_scratch

# The CUDA caching allocator hands out blocks in multiples of 512 bytes.
BLOCK = 512


def block_rounded(n: int) -> int:
    return int(math.ceil(n / BLOCK) * BLOCK) if n > 0 else 0


# The ops that run on cuBLAS on a GPU: the first one on a thread allocates that
# thread's cuBLAS workspace through the caching allocator, and it stays (the
# forward on the caller's thread, the backward on autograd's device thread).
_BLAS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "_scaled_mm"}


class MemoryTracker(TorchDispatchMode):
    """Live and peak bytes of the storages created while it is active.

    Storages that already exist can be added with :meth:`tag`. A storage is
    counted once however many views share it, and leaves the count when
    Python frees it. Each storage has a category ("other" until tagged); the
    totals per category at the peak are kept. ``scalars``: what data-dependent
    reads (``.item()``, ``int(t)``) return under fake tensors, namely 1, so
    optional branches such as "if any latent is dead" are taken and the trace
    covers the larger path.
    """

    def __init__(self, scalars: bool = False) -> None:
        super().__init__()
        self.live: dict[int, tuple[int, str]] = {}
        self.by_category: dict[str, int] = {}
        self.current = 0
        self.peak = 0
        self.peak_by_category: dict[str, int] = {}
        self._refs: dict[int, weakref.ref] = {}
        self._scalars = scalars
        self._eid: dict[int, int] = {}
        self._next_eid = 0
        # From start_events() on: every device allocation (eid, bytes) and free (eid, -bytes)
        # in order, for the caching allocator's replay (scheduling/allocator.py).
        self.events: list[tuple[int, int]] | None = None
        self.host_eids: set[int] = set()
        self.gradient_eids: set[int] = set()
        # Where in ``events`` the first BLAS op of the forward / the backward ran, and the
        # first that runs on cuBLASLt.
        self.blas_marks: dict[str, int] = {}
        self.lt_marks: dict[str, int] = {}
        # What CUDA kernels allocate for themselves while they run (cuda_kernels.py):
        # (position in ``events``, the allocations' bytes).
        self.scratch: list[tuple[int, list[int]]] = []
        # A gradient sum autograd makes in place on a GPU (``_accumulate``): the sum's storage,
        # the first gradient's, where the sum's allocation goes in ``events``, the bytes then live.
        self._pending: tuple[int, int, int, int] | None = None
        # The autograd node running when each storage was made (0: none), and the one now.
        self._born: dict[int, int] = {}
        self._node = 0

    def start_events(self) -> None:
        """Record allocations from now on, starting with what lives on the device (in creation order)."""
        self.events = [(self._eid[key], size) for key, (size, cat) in self.live.items() if cat != "host"]

    def _free_when_dead(self, key: int) -> Callable[[weakref.ref], None]:
        """The callback of the weak reference to storage ``key``: its bytes are freed when it dies."""
        return lambda _r: self._free(key)

    def _free(self, key: int) -> None:
        if self._pending is not None and key == self._pending[1]:
            # The first gradient died with the sum: autograd added in place, one storage throughout.
            self._pending = None
            self.live.pop(key, None)
            self._refs.pop(key, None)
            self._eid.pop(key, None)
            self._born.pop(key, None)
            return
        if self._pending is not None and key == self._pending[0]:
            self.settle()
        size, cat = self.live.pop(key, (0, "other"))
        self._refs.pop(key, None)
        self._born.pop(key, None)
        eid = self._eid.pop(key, None)
        if self.events is not None and eid is not None and size:
            self.events.append((eid, -size))
        self.current -= size
        self.by_category[cat] = self.by_category.get(cat, 0) - size

    def _note(self, key: int, category: str) -> None:
        eid = self._eid.get(key)
        if eid is None:
            return
        if category == "host":
            self.host_eids.add(eid)
        elif category == "gradients":
            self.gradient_eids.add(eid)

    def _add(self, st: torch.UntypedStorage, category: str = "other") -> None:
        key = id(st)
        size = block_rounded(st.nbytes())
        if key in self.live:
            old, cat = self.live[key]
            if category != "other" and category != cat:
                self.by_category[cat] -= old
                self.by_category[category] = self.by_category.get(category, 0) + old
                cat = category
            # Storages can grow in place (resize_): on a GPU a new block, then the old one freed.
            if size > old:
                self.current += size - old
                self.by_category[cat] += size - old
                new = self._new_eid(key)
                if self.events is not None:
                    self.events += [(new, size), (self._eid.get(key, new), -old)]
                self._eid[key] = new
            self.live[key] = (max(size, old), cat)
            self._note(key, cat)
        elif size > 0:
            self.live[key] = (size, category)
            self._born[key] = self._node
            self._eid[key] = eid = self._new_eid(key)
            if self.events is not None:
                self.events.append((eid, size))
            self._note(key, category)
            self.current += size
            self.by_category[category] = self.by_category.get(category, 0) + size
            self._refs[key] = weakref.ref(st, self._free_when_dead(key))
        if self.current > self.peak:
            self.peak = self.current
            self.peak_by_category = dict(self.by_category)

    def _new_eid(self, key: int) -> int:
        self._next_eid += 1
        return self._next_eid

    def _accumulate(self, func: Any, args: tuple, out: Any) -> bool:
        """Count autograd's sum of a tensor's two gradients as the first one's storage.

        The engine adds a second gradient to the first (``InputBuffer::accumulate``) in place
        when it holds the only reference to the first, as it does on a GPU; under a dispatch
        mode, and always for fake tensors, it adds out of place, and the first dies at once.
        On a GPU the sum of an SAE's latent gradients is thus no new 256 MiB (the reference's
        sae relu b4096 case). Should the first gradient still be alive at the next op, the
        sum was a new storage after all, and counts as one (``settle``). The first gradient
        comes from another node than the one that just ran: an add inside a backward formula,
        of two tensors that node made, stays out of place.
        """
        if (func is not torch.ops.aten.add.Tensor or not self._node
                or not isinstance(out, torch.Tensor) or len(args) < 2 or not out.is_contiguous()
                or not all(isinstance(a, torch.Tensor) and a.shape == out.shape for a in args[:2])
                or args[0].dtype != out.dtype):
            return False
        first, st = id(args[0].untyped_storage()), out.untyped_storage()
        key = id(st)
        if (first not in self.live or key in self.live or self._born.get(first) == self._node
                or self.live[first][0] != block_rounded(st.nbytes())):
            return False
        self.live[key] = self.live[first]
        self._eid[key] = self._eid[first]
        self._born[key] = self._node
        self._refs[key] = weakref.ref(st, self._free_when_dead(key))
        self._pending = (key, first, len(self.events or ()), self.current)
        return True

    def settle(self) -> None:
        """Count a pending gradient sum whose first gradient outlived it as a storage of its own
        (at each op, and before a step's end is read)."""
        if self._pending is None:
            return
        key, _, pos, then = self._pending
        self._pending = None
        size, cat = self.live[key]
        self._eid[key] = eid = self._new_eid(key)
        if self.events is not None:
            self.events.insert(pos, (eid, size))
        self.current += size
        self.by_category[cat] = self.by_category.get(cat, 0) + size
        if then + size > self.peak:
            self.peak = then + size
            self.peak_by_category = dict(self.by_category)

    def tag(self, tensors: Iterable[Any], category: str) -> None:
        """Count ``tensors`` (already existing or not) under ``category``."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self._add(t.untyped_storage(), category)

    def retag(self, old: str, new: str) -> None:
        """Move every live storage of category ``old`` to ``new``."""
        for key, (size, cat) in list(self.live.items()):
            if cat == old:
                self.live[key] = (size, new)
                self._note(key, new)
                self.by_category[old] -= size
                self.by_category[new] = self.by_category.get(new, 0) + size

    def reset_peak(self) -> None:
        self.peak = self.current
        self.peak_by_category = dict(self.by_category)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.settle()
        node = torch._C._current_autograd_node()
        self._node = id(node) if node is not None else 0
        if self._scalars and func is torch.ops.aten._local_scalar_dense.default:
            t = args[0]
            return True if t.dtype == torch.bool else (1.0 if t.is_floating_point() else 1)
        out = func(*args, **(kwargs or {}))
        if not self._accumulate(func, args, out):
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self._add(t.untyped_storage())
        if self.events is None:
            return out
        name = func.__name__.split(".")[0]
        if name in _BLAS:
            # cuBLAS takes its workspace once the op's output exists; an addmm with a bias
            # (a linear layer) runs on cuBLASLt, which takes a workspace of its own too.
            where = "backward" if self._node else "forward"
            self.blas_marks.setdefault(where, len(self.events))
            if name == "addmm" and isinstance(args[0], torch.Tensor) and args[0].dim() == 1:
                self.lt_marks.setdefault(where, len(self.events))
        elif sizes := reduction_scratch(func, args, kwargs or {}):
            self.scratch.append((len(self.events), sizes))
        return out
