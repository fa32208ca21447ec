"""The fused C decode step: built once with the system C compiler and loaded with ``ctypes``.

A decode step of the memory is ~20 tiny tensor operations per layer; on a small backbone their dispatch
cost, not their arithmetic, is what shows (see the README's decode-overhead section). ``decode_step.c``
does the whole step (features, read, state update and the corrections) in one call. It is plain C99
with no dependency but libm, so any C compiler builds it in well under a second; the library is cached
under ``$DELTA_MEM_KERNEL_CACHE`` (default ``$XDG_CACHE_HOME/papershelf/delta-mem`` or
``~/.cache/papershelf/delta-mem``), named by a hash of the source and the compiler command, so an edit or
another compiler rebuilds it. Without a compiler the package uses the torch twin
(``DeltaMemLayer._decode_step``) and :func:`kernel_status` says why.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("decode_step.c")
FLAGS = ("-O3", "-std=c99", "-shared", "-fPIC")
UPDATE_MODE_CODES = {"standard": 0, "lambda_outside": 1, "no_lambda": 2}  # the enum in decode_step.c


class Plan(ctypes.Structure):
    """``dm_plan`` in decode_step.c: what stays fixed across a layer's decode steps."""

    _fields_ = [
        ("w_in", ctypes.c_void_p),
        ("b_in", ctypes.c_void_p),
        ("z", ctypes.c_void_p),
        ("state", ctypes.c_void_p),
        ("reads", ctypes.c_void_p),
        *((name, ctypes.c_int64) for name in ("batch", "d", "heads", "r", "n_groups", "mode", "couple")),
        ("scale", ctypes.c_double),
        ("dw", ctypes.c_void_p * 4),
        ("dout", ctypes.c_void_p * 4),
        ("dn", ctypes.c_int64 * 4),
    ]


# plan, x
ARGTYPES = [ctypes.POINTER(Plan), ctypes.c_void_p]

_loaded: dict[str, object] = {}  # "kernels" -> {dtype name: function}, or "error" -> why not


class KernelUnavailable(RuntimeError):
    """The C decode step could not be built or loaded here."""


def cache_dir() -> Path:
    if os.environ.get("DELTA_MEM_KERNEL_CACHE"):
        return Path(os.environ["DELTA_MEM_KERNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "papershelf" / "delta-mem"


def compiler() -> str:
    return os.environ.get("CC") or "cc"


def build(directory: Path | None = None, cc: str | None = None) -> Path:
    """Compile ``decode_step.c`` into ``directory`` (once: an existing library of the same source and
    command is reused) and return the library's path; :class:`KernelUnavailable` says why it failed."""
    cc = cc or compiler()
    words = shlex.split(cc)  # CC may carry a launcher or options ("ccache gcc")
    exe = shutil.which(words[0]) if words else None
    if exe is None:
        raise KernelUnavailable(f"no C compiler {cc!r} on PATH (set CC to one)")
    command = [exe, *words[1:], *FLAGS]
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + " ".join((*command, platform.machine())).encode()).hexdigest()[:16]
    directory = Path(directory) if directory is not None else cache_dir()
    lib = directory / f"decode_step-{key}.so"
    if lib.exists():
        return lib
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=directory)  # same directory: the rename is atomic
        os.close(fd)
    except OSError as exc:
        raise KernelUnavailable(f"cannot write the kernel cache {directory} ({exc})") from None
    try:
        try:
            done = subprocess.run(
                [*command, "-o", tmp, str(SOURCE), "-lm"], capture_output=True, text=True, timeout=120
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise KernelUnavailable(f"{cc} could not be run ({exc})") from None
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no message"])[0]
            raise KernelUnavailable(f"{cc} failed to compile {SOURCE.name}: {first}")
        try:
            os.chmod(tmp, 0o755)  # mkstemp made it private: a shared cache must be loadable by all
            os.replace(tmp, lib)  # another process may have raced us to the same bytes: harmless
        except OSError as exc:
            raise KernelUnavailable(f"cannot write the kernel cache {directory} ({exc})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


def load(path: Path) -> dict:
    """The library's two entry points by torch dtype name, with their ``ctypes`` signatures set."""
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise KernelUnavailable(f"cannot load {path} ({exc})") from None
    kernels = {}
    for dtype, suffix in (("float32", "f32"), ("float64", "f64")):
        try:
            fn = getattr(lib, f"dm_decode_step_{suffix}")
        except AttributeError:
            raise KernelUnavailable(f"cannot load {path}: no dm_decode_step_{suffix} in it") from None
        fn.restype, fn.argtypes = None, ARGTYPES
        kernels[dtype] = fn
    return kernels


def kernels() -> dict | None:
    """The loaded kernels (built on the first call of the process), or None when they are unavailable."""
    if "kernels" not in _loaded and "error" not in _loaded:
        try:
            try:
                _loaded["kernels"] = load(build())
            except KernelUnavailable as exc:
                if not str(exc).startswith("cannot load"):
                    raise
                try:
                    build().unlink(missing_ok=True)  # a damaged cached library: rebuild it once
                except OSError as unlink_error:  # not ours to remove (a shared, read-only cache)
                    raise KernelUnavailable(f"{exc}; cannot replace it ({unlink_error})") from None
                _loaded["kernels"] = load(build())
        except KernelUnavailable as exc:
            _loaded["error"] = str(exc)
    return _loaded.get("kernels")


def kernel_status() -> str:
    """``"c"`` when the fused decode step is in use, else why the torch twin runs instead."""
    return "c" if kernels() is not None else f"torch ({_loaded['error']})"
