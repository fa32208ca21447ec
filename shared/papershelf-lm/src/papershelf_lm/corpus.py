"""Natural text for training and for haystack filler: the running interpreter's standard-library sources.

Nothing is committed or downloaded: the text is read at run time. The split is by file (a stable hash
of the file's path relative to the standard library), so it is deterministic for a given Python
version; every result that depends on the corpus records :func:`corpus_id`.
"""

from __future__ import annotations

import hashlib
import platform
import sysconfig
from functools import lru_cache
from pathlib import Path

from papershelf.errors import InputError, check_choice

SPLITS = ("train", "validation")
VALIDATION_SHARE = 20  # one file in 20 goes to validation


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_id() -> str:
    """What the corpus depends on: the Python implementation and version."""
    return f"{platform.python_implementation()}-{platform.python_version()}-stdlib"


def _split_of(relative: str) -> str:
    digest = int(hashlib.sha1(relative.encode()).hexdigest(), 16)
    return "validation" if digest % VALIDATION_SHARE == 0 else "train"


@lru_cache(maxsize=2)
def corpus_files(split: str) -> tuple[Path, ...]:
    """The .py files of the standard library in ``split``, sorted (tests and site-packages excluded)."""
    split = check_choice("split", split, SPLITS)
    root = stdlib_root()
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("site-packages/", "test/", "idlelib/idle_test/")) or "/tests/" in rel:
            continue
        if _split_of(rel) == split:
            files.append(path)
    if not files:
        raise InputError(f"no standard-library sources found under {root}")
    return tuple(files)


@lru_cache(maxsize=2)
def corpus_bytes(split: str = "train") -> bytes:
    """All the files of ``split`` concatenated (separated by blank lines), as bytes."""
    return b"\n\n".join(p.read_bytes() for p in corpus_files(split))
