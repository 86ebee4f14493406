"""Where training data may come from. Torch-free: the API checks a request's
``data_path`` with :func:`resolve_data_path` before it writes anything."""

from __future__ import annotations

from pathlib import Path

from gpufleet.engine.config import TrainingConfigError

DATA_SUFFIXES = (".npy", ".safetensors", ".pt")


class DataPathError(TrainingConfigError):
    def __init__(self, message: str):
        super().__init__("data_path", message)


def resolve_data_path(data_root: str | Path | None, path: str | Path) -> Path:
    """The absolute file for ``path`` under ``data_root``, or a DataPathError.

    Symlinks and ``..`` are resolved before the check, so neither can reach a
    file outside the root.
    """
    if data_root is None:
        raise DataPathError("no data root is configured (set GPUFLEET_DATA_ROOT)")
    root = Path(data_root).expanduser().resolve()
    raw = Path(str(path)).expanduser()
    try:
        target = (raw if raw.is_absolute() else root / raw).resolve()
        is_file = target.is_file()
    except OSError as exc:  # a name too long, a loop of symlinks: not a file anyone can read
        raise DataPathError(f"{str(path)[:80]!r} cannot be a data file ({exc.strerror or exc})") from None
    if not target.is_relative_to(root):
        raise DataPathError(f"{str(path)!r} is outside the data root {root}; give a path under it")
    if target.suffix not in DATA_SUFFIXES:
        raise DataPathError(
            f"{str(path)!r} has an unsupported type; use one of {', '.join(DATA_SUFFIXES)}"
        )
    if not is_file:
        raise DataPathError(f"{str(path)!r} does not exist under the data root {root}")
    return target
