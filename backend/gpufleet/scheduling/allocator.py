"""PyTorch's CUDA caching allocator, replayed: what a sequence of allocations reserves.

``torch.cuda.max_memory_reserved`` is not the allocated peak plus a constant:
it depends on the order and the sizes of every allocation and free, because
freed blocks stay cached in their pool and a request reuses the smallest
cached block that fits, split or not. So the trace's sequence of allocations
and frees (``memtrace``) is replayed here through the allocator's own rules
(``c10/cuda/CUDACachingAllocator.cpp``, default configuration: no
``max_split_size_mb``, no expandable segments, no garbage collection), as
xMem (Middleware 2025) does:

- every request is rounded up to a multiple of 512 bytes (512 at least);
- requests up to 1 MiB use the small pool, whose segments are 2 MiB; larger
  ones use the large pool, whose segments are 20 MiB for requests under
  10 MiB and the request rounded up to 2 MiB otherwise;
- a request takes the smallest cached free block of its pool that fits
  (ties: the lowest address), else a new segment (``cudaMalloc``);
- the block is split when what remains is at least 512 bytes (small pool) or
  more than 1 MiB (large pool); otherwise the whole block is handed out and
  counted as allocated;
- a freed block merges with its free neighbours in the same segment and
  stays cached: segments are never returned (``empty_cache`` is not called).

Pure Python and no torch, so the API can run it; a step's few thousand
events replay in milliseconds.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20  # largest request served by the small pool
SMALL_BUFFER = 2 << 20  # small pool segment
MIN_LARGE_ALLOC = 10 << 20  # requests below this (and > 1 MiB) get a 20 MiB segment
LARGE_BUFFER = 20 << 20
ROUND_LARGE = 2 << 20


def round_size(size: int) -> int:
    """What the allocator asks of its pools for a request of ``size`` bytes."""
    return MIN_BLOCK if size < MIN_BLOCK else -(-size // MIN_BLOCK) * MIN_BLOCK


def allocation_size(size: int) -> int:
    """The segment ``cudaMalloc`` gets when no cached block fits a (rounded) request."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


@dataclass(eq=False)
class Block:
    size: int
    addr: int
    small: bool
    allocated: bool = False
    prev: Block | None = None
    next: Block | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.size, self.addr)


@dataclass
class PoolStats:
    segments: int = 0
    reserved: int = 0
    peak_segments: int = 0
    peak_reserved: int = 0


@dataclass
class CachingAllocator:
    """One device's caching allocator on one stream: ``malloc``/``free`` and its peaks."""

    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    pools: dict[bool, PoolStats] = field(default_factory=lambda: {True: PoolStats(), False: PoolStats()})
    _free: dict[bool, list[tuple[int, int]]] = field(default_factory=lambda: {True: [], False: []})
    _blocks: dict[tuple[bool, int, int], Block] = field(default_factory=dict)
    _next_addr: int = 1 << 32

    def malloc(self, request: int) -> Block | None:
        """Allocate ``request`` bytes; None for a zero-byte request (it takes no block)."""
        if request <= 0:
            return None
        size = round_size(request)
        small = size <= SMALL_SIZE
        block = self._take_free(small, size) or self._new_segment(small, allocation_size(size))
        remaining = block.size - size
        if remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE:
            rest = Block(remaining, block.addr + size, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._insert(rest)
        block.allocated = True
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def free(self, block: Block | None) -> None:
        if block is None:
            return
        block.allocated = False
        self.allocated -= block.size
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.allocated:
                self._remove(neighbour)
                if neighbour is block.prev:
                    block.addr, block.prev = neighbour.addr, neighbour.prev
                    if block.prev is not None:
                        block.prev.next = block
                else:
                    block.next = neighbour.next
                    if block.next is not None:
                        block.next.prev = block
                block.size += neighbour.size
        self._insert(block)

    def _take_free(self, small: bool, size: int) -> Block | None:
        free = self._free[small]
        i = bisect.bisect_left(free, (size, -1))
        if i == len(free):
            return None
        key = free.pop(i)
        return self._blocks.pop((small, *key))

    def _new_segment(self, small: bool, size: int) -> Block:
        block = Block(size, self._next_addr, small)
        # Addresses only order blocks of equal size; keep segments apart.
        self._next_addr += size + ROUND_LARGE
        stats = self.pools[small]
        stats.segments += 1
        stats.reserved += size
        stats.peak_segments = max(stats.peak_segments, stats.segments)
        stats.peak_reserved = max(stats.peak_reserved, stats.reserved)
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return block

    def _insert(self, block: Block) -> None:
        bisect.insort(self._free[block.small], block.key)
        self._blocks[(block.small, *block.key)] = block

    def _remove(self, block: Block) -> None:
        free = self._free[block.small]
        i = bisect.bisect_left(free, block.key)
        del free[i]
        del self._blocks[(block.small, *block.key)]


@dataclass(frozen=True)
class Replay:
    """What a replayed sequence shows: the allocator's peaks (bytes) and its peak segment counts."""

    peak_allocated: int
    peak_reserved: int
    small_segments: int
    large_segments: int
    small_reserved: int
    large_reserved: int


def replay(events: Iterable[tuple[int, int]]) -> Replay:
    """Replay ``(id, bytes)`` events: bytes > 0 allocates ``id``, bytes < 0 frees it (bytes == 0: ignored)."""
    alloc = CachingAllocator()
    live: dict[int, Block | None] = {}
    for key, size in events:
        if size > 0:
            live[key] = alloc.malloc(size)
        elif size < 0 and key in live:
            alloc.free(live.pop(key))
    small, large = alloc.pools[True], alloc.pools[False]
    return Replay(alloc.peak_allocated, alloc.peak_reserved, small.peak_segments, large.peak_segments,
                  small.peak_reserved, large.peak_reserved)


# cuBLASLt's workspace (CUBLASLT_WORKSPACE_SIZE, 1 MiB by default), taken at the first op of a
# thread that runs on it, after cuBLAS's own: both seen on an H200 with torch 2.11.
LT_WORKSPACE = 1 << 20
# Event ids of kernels' scratch: below the workspaces' (-1, -2) and DDP's buckets (-100 down).
_SCRATCH_IDS = -(1 << 40)


def device_events(trace: object, *, workspace: int = 0, ddp: bool = False,
                  bucket_bytes: int = 25 << 20, kernels: bool = True) -> list[tuple[int, int]]:
    """A trace's allocation sequence as a GPU runs it.

    ``workspace``: the bytes of the cuBLAS workspace each thread allocates at its first BLAS op
    (the forward's and the backward's, ``trace.blas_marks``), and cuBLASLt's where it runs
    (``trace.lt_marks``); ``workspace=0`` (the CPU) has neither. The scratch CUDA kernels
    allocate while they run (``trace.scratch``) is taken and given back in its place, unless
    ``kernels`` is false. ``ddp``: gradients are views into DDP's buckets, allocated when the
    model is wrapped (``bucket_bytes`` each, as ``bucket_cap_mb`` says), so their own
    allocations are left out.
    """
    events = [(int(e), int(n)) for e, n in getattr(trace, "events", ())]
    marks = dict(getattr(trace, "blas_marks", {}) or {})
    lt = dict(getattr(trace, "lt_marks", {}) or {})
    inserts: list[tuple[int, int, list[tuple[int, int]]]] = []
    if workspace > 0:
        inserts += [(int(pos), 1, [(-(i + 1), workspace)]) for i, pos in enumerate(marks.values())]
        inserts += [(int(pos), 2, [(-(i + 11), LT_WORKSPACE)]) for i, pos in enumerate(lt.values())]
    # A kernel's scratch is taken after its output and given back, last first, as it returns.
    for k, (pos, sizes) in enumerate((getattr(trace, "scratch", ()) or ()) if kernels else ()):
        ids = [_SCRATCH_IDS - 8 * k - j for j in range(len(sizes))]
        taken = list(zip(ids, (int(n) for n in sizes), strict=True))
        inserts.append((int(pos), 0, taken + [(e, -n) for e, n in reversed(taken)]))
    # From the last place back, so that each index still means the original sequence; at one
    # place: a kernel's scratch, cuBLAS's workspace, cuBLASLt's.
    for pos, _, seq in sorted(inserts, key=lambda x: (-x[0], -x[1])):
        events[pos:pos] = seq
    if ddp:
        grads = {int(g) for g in getattr(trace, "gradient_ids", ())}
        events = [(e, n) for e, n in events if e not in grads]
        left, buckets, eid = int(getattr(trace, "gradient_bytes", 0)), [], -100
        while left > 0:
            buckets.append((eid, min(left, bucket_bytes)))
            left -= bucket_bytes
            eid -= 1
        events = buckets + events
    return events
