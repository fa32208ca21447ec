"""Reproducibility: seeding, run manifests, and atomic file writing.

Atomic writes go to a temporary file in the destination's folder and are renamed over the destination
only once complete, so a crash or a serialisation error never leaves a half-written file behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from papershelf.errors import InputError


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's legacy global generator and torch (when they are installed).

    Packages should still pass explicit ``numpy.random.Generator`` objects around; this is for code
    that uses global state (third-party anchors, torch modules).
    """
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    with contextlib.suppress(ImportError):
        import numpy as np

        np.random.seed(seed % 2**32)  # noqa: NPY002 - deliberately the legacy global state
    if "torch" in sys.modules:  # importing torch only to seed it would cost seconds
        torch = sys.modules["torch"]
        torch.manual_seed(seed)


def _git_commit(cwd: str | os.PathLike[str] | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=cwd, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def package_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def run_manifest(**extra: Any) -> dict[str, Any]:
    """What a result was produced with: time, platform, Python, key library versions, git commit."""
    libs = {name: package_version(name) for name in ("numpy", "scipy", "torch", "scikit-learn", "triton")}
    return {
        "time_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "libraries": {k: v for k, v in libs.items() if v is not None},
        "git_commit": _git_commit(),
        **extra,
    }


def check_output_path(path: str | os.PathLike[str] | None, flag: str = "--out") -> None:
    """Refuse an output path that cannot be written, *before* a long run produces what goes there: a
    directory, or a path whose nearest existing parent is not a writable directory. Creates nothing
    itself: missing folders below that parent are made by the write (:func:`atomic_path`), like
    ``mkdir -p``, so ``--out results/new/x.json`` works in a fresh clone."""
    if path is None or str(path) == "":
        return
    dest = Path(path)
    if dest.is_dir():
        raise InputError(f"{flag} {str(dest)!r} is a directory; give a file name")
    parent = dest.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{flag} {str(dest)!r} cannot be written ({str(parent)!r} is not a writable folder)")


def check_outputs(
    outputs: dict[str, str | os.PathLike[str] | None],
    inputs: dict[str, str | os.PathLike[str] | None] | None = None,
) -> None:
    """:func:`check_output_path` for every ``{flag: path}`` output given, then refuse two outputs naming
    the same file and an output naming one of the ``inputs`` (it would be overwritten) — before any work."""
    given = {flag: Path(p).resolve() for flag, p in outputs.items() if p is not None and str(p) != ""}
    for flag, path in outputs.items():
        check_output_path(path, flag)
    seen: dict[Path, str] = {}
    for flag, path in given.items():
        if path in seen:
            raise InputError(f"{seen[path]} and {flag} name the same file; give two different files")
        seen[path] = flag
    for flag, path in (inputs or {}).items():
        if path is not None and str(path) != "" and Path(path).resolve() in seen:
            raise InputError(f"{seen[Path(path).resolve()]} would overwrite the input {flag} {str(path)!r}")


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike[str], *, mode: str = "w", encoding: str | None = "utf-8"
) -> Iterator[Any]:
    """Open a temporary file beside ``path``; rename it over ``path`` only if the block succeeds.

    An output path that cannot be written (a directory, a parent that is a file, no permission) raises
    :class:`~papershelf.errors.InputError` naming it, before the block runs."""
    dest = Path(path)
    if dest.is_dir():
        raise InputError(f"output path {str(dest)!r} is a directory; give a file name")
    try:
        if dest.parent and not dest.parent.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent or ".")
    except OSError as exc:
        raise InputError(f"cannot write output path {str(dest)!r}: {exc.strerror or exc}") from None
    binary = "b" in mode
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates 0600 files; give the result the permissions a plain open() would have.
        os.chmod(tmp, dest.stat().st_mode & 0o777 if dest.exists() else 0o666 & ~_umask())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as handle:
        handle.write(text)


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> None:
    """Serialise ``obj`` to JSON first, then write it atomically; on failure ``path`` is untouched."""
    # Serialising before opening anything means a TypeError cannot even create the temp file.
    text = json.dumps(obj, indent=indent, allow_nan=False, default=_json_default)
    atomic_write_text(path, text + "\n")


def _json_default(obj: Any) -> Any:
    """Make NumPy scalars and arrays JSON-serialisable; anything else is a TypeError."""
    if hasattr(obj, "tolist") and callable(obj.tolist):
        return obj.tolist()
    if hasattr(obj, "item") and callable(obj.item):
        return obj.item()
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")
