"""What CUDA kernels allocate for themselves, which a trace on the CPU cannot see.

A reduction on a CUDA GPU (``sum``, ``mean``, ``amax``, ``any``, ``argmax``, a norm...)
runs PyTorch's ``gpu_reduce_kernel`` (``aten/src/ATen/native/cuda/Reduce.cuh``). When
each output has many inputs, it splits them across thread blocks and stages their
partial results in a buffer it takes from the caching allocator for the length of the
kernel (``ReduceConfig::global_memory_size``), with a semaphore per output block. For a
column sum, the bias gradient of a linear layer, that buffer is large: summing the
gradient of a 4096 x 4096 activation over its batch stages 128 MiB on an H200, twice
the tensor, measured with ``torch.cuda.memory._record_memory_history`` at the peak of
the ``mlp`` reference case (``tests/scheduling/data/README.md``). The same case on the
CPU allocates nothing of the kind.

``reduction_scratch`` replays ``setReduceConfig`` for an op's tensors: the iterator's
dimensions as TensorIterator orders and coalesces them, the block shape, the split of
the inputs across blocks. The GPU is taken to have 132 multiprocessors of 2,048
threads (H100 and H200): more multiprocessors split across more blocks, up to the
kernel's own bound of 16 values per thread, so the figure holds for smaller GPUs too.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from gpufleet.scheduling.allocator import round_size

MULTIPROCESSORS = 132
THREADS_PER_MULTIPROCESSOR = 2048
WARP = 32
MAX_THREADS = 512  # mnt_wrapper<T>::MAX_NUM_THREADS (256 for complex double)
INPUT_VEC = 4  # ReduceConfig::input_vec_size; every reduction here runs with vt0 = 4

# The reductions that run gpu_reduce_kernel, and the accumulator's size in bytes for an input
# dtype (arg_t): sums and means accumulate half and bfloat16 in float, integers in int64.
_FLOAT_ACC = {"sum", "mean", "nansum", "linalg_vector_norm", "prod"}
_SAME = {"amax", "amin"}
_BOOL = {"any", "all"}
_PAIR = {"argmax", "argmin", "max", "min"}  # (value, int64 index)
_WELFORD = {"var", "std", "var_mean", "std_mean"}


def _acc_size(name: str, dtype: torch.dtype) -> int | None:
    if name in _BOOL:
        return 1
    if name in _FLOAT_ACC:
        if not dtype.is_floating_point and not dtype.is_complex:
            return 8
        return max(4, dtype.itemsize)
    if name in _SAME:
        return dtype.itemsize
    if name in _PAIR:
        return 16
    if name in _WELFORD:
        return 16 if dtype.itemsize <= 4 else 32
    return None


def _reduced_dims(name: str, args: tuple, kwargs: dict, ndim: int) -> list[int] | None:
    """The dims ``op`` reduces; None when it is not a reduction over dims (max(a, b), ...)."""
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if name in {"max", "min"} and not isinstance(dim, int):
        return None  # max(t) over everything runs another kernel; max(a, b) is elementwise
    if name == "linalg_vector_norm":
        dim = kwargs.get("dim", args[2] if len(args) > 2 else None)
    if isinstance(dim, bool) or (dim is not None and not isinstance(dim, int | list | tuple)):
        return None
    if dim is None or (isinstance(dim, list | tuple) and len(dim) == 0):
        return list(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % ndim for d in dims}) if ndim else []


def _iterator(shape: list[int], strides: list[int], reduced: list[int]) -> list[tuple[int, int, bool]]:
    """(size, input stride in elements, reduced?) per dimension, fastest first, as TensorIterator
    orders a reduction's dimensions (reduced ones first) and coalesces them."""
    dims = [(s, st, d in reduced) for d, (s, st) in enumerate(zip(shape, strides, strict=True)) if s != 1]
    dims.sort(key=lambda x: (not x[2], x[1]))
    out: list[tuple[int, int, bool]] = []
    for size, stride, red in dims:
        if out and out[-1][2] == red and out[-1][0] * out[-1][1] == stride:
            out[-1] = (out[-1][0] * size, out[-1][1], red)
        else:
            out.append((size, stride, red))
    return out


def _output_vec_size(dims: list[tuple[int, int, bool]], n_reduce: int) -> int:
    vec = 4
    for n in [dims[n_reduce][0]] + [st for i, (_, st, _) in enumerate(dims) if i != n_reduce]:
        while n % vec:
            vec //= 2
    return vec


def reduce_buffer(shape: list[int], strides: list[int], reduced: list[int], acc_bytes: int) -> tuple[int, int]:
    """(staging buffer, semaphores) in bytes that ``gpu_reduce_kernel`` allocates for an input of
    ``shape``/``strides`` (elements) reduced over ``reduced``: (0, 0) when it needs none."""
    dims = _iterator(shape, strides, reduced)
    if not dims:
        return 0, 0
    n_reduce = sum(1 for d in dims if d[2])
    inputs = math.prod(d[0] for d in dims if d[2])
    outputs = math.prod(d[0] for d in dims if not d[2])
    fastest = n_reduce == len(dims) or dims[0][1] < dims[n_reduce][1]
    if fastest:
        dim0, dim1, moving = inputs, outputs, dims[0][1]
    else:
        dim0, dim1, moving = outputs, inputs, dims[n_reduce][1]
    out_vec = 1
    if moving == 1:
        if fastest and dim0 > 128 and n_reduce == 1:
            dim0 //= INPUT_VEC
        elif not fastest:
            out_vec = _output_vec_size(dims, n_reduce)
            dim0 //= out_vec
    # ReduceConfig::set_block_dimension
    max_threads = MAX_THREADS // out_vec
    pow0 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    pow1 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    width = min(pow0, WARP)
    height = min(pow1, max_threads // width)
    width = min(pow0, max_threads // height)
    step_in = step_out = 1
    if fastest:
        block_x_reduce, step_in = True, step_in * width
    else:
        block_x_reduce, step_out = False, step_out * width
    per_thread = -(-inputs // step_in)
    split_y = per_thread >= height * 16 or per_thread >= 256
    if split_y:
        step_in *= height
    else:
        step_out *= height
    per_thread = -(-inputs // step_in)
    grid = -(-(outputs // out_vec) // step_out)
    target = MULTIPROCESSORS * (THREADS_PER_MULTIPROCESSOR // (width * height))
    ctas = 1
    if split_y and per_thread >= 256 and grid <= target:
        ctas = max(min(-(-target // grid), -(-per_thread // 16)), -(-per_thread // 256))
    if ctas <= 1:
        return 0, 0
    size = acc_bytes * outputs * ctas
    if not block_x_reduce:
        size *= width * out_vec
    return size, 4 * grid


def _last_pow2(n: int) -> int:
    return max(1, 1 << (int(n).bit_length() - 1)) if n > 0 else 1


def reduction_scratch(func: Any, args: tuple, kwargs: dict) -> list[int]:
    """The allocations (bytes, in order) the CUDA kernel of ``func`` on these arguments makes for
    itself while it runs, each rounded to the allocator's 512-byte blocks; [] for none.

    A sum whose accumulation type is not the input's first copies the input to it (``make_reduction``
    casts ``self``): summing a bool mask counts in int64, eight bytes per element. Half and
    bfloat16 summed into float are read as they are.
    """
    name = func.__name__.split(".")[0]
    t = args[0] if args else None
    if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.is_sparse:
        return []
    in_dtype = _input_dtype(name, t.dtype, kwargs.get("dtype"))
    acc = _acc_size(name, in_dtype)
    reduced = _reduced_dims(name, args, kwargs, t.dim()) if acc is not None else None
    if acc is None or reduced is None:
        return []
    copy, strides = 0, list(t.stride())
    if in_dtype != t.dtype:
        copy = t.numel() * in_dtype.itemsize
        strides = [math.prod(t.shape[d + 1:]) for d in range(t.dim())]
    buffer, semaphores = reduce_buffer(list(t.shape), strides, reduced, acc)
    return [round_size(n) for n in (copy, buffer, semaphores) if n]


def _input_dtype(name: str, dtype: torch.dtype, asked: torch.dtype | None) -> torch.dtype:
    """The dtype a reduction reads its input as on a CUDA GPU (``make_reduction``'s ``in_dtype``)."""
    if name not in {"sum", "nansum", "prod", "mean"}:
        return dtype
    integral = not dtype.is_floating_point and not dtype.is_complex
    out = asked or (torch.int64 if integral and name != "mean" else dtype)
    if dtype in (torch.float16, torch.bfloat16) and out == torch.float32:
        return dtype
    return out
