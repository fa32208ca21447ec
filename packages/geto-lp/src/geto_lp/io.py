"""Reading and writing the CLI's files: .npy histograms and plans, images; every write is atomic."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from papershelf.cli import read_npy
from papershelf.errors import InputError, MissingDependencyError
from papershelf.repro import atomic_path

__all__ = ["read_array", "read_image", "write_image", "write_npy", "write_sparse"]


def read_array(path: str | os.PathLike[str], what: str = "input") -> np.ndarray:
    """A numeric array from a .npy file, with one-line errors for missing or unreadable files."""
    arr = read_npy(str(path), what)  # missing, corrupt, pickled or .npz: one error line
    if not (np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)):
        raise InputError(f"{what} file {str(path)!r} must hold a numeric array")
    return arr


def write_npy(path: str | os.PathLike[str], arr: np.ndarray) -> None:
    with atomic_path(path, mode="wb") as handle:
        np.save(handle, np.asarray(arr))


def write_sparse(path: str | os.PathLike[str], mat: Any) -> None:
    """A scipy.sparse matrix as .npz (``scipy.sparse.load_npz`` reads it back)."""
    with atomic_path(path, mode="wb") as handle:
        sp.save_npz(handle, sp.csr_matrix(mat))


def read_image(path: str | os.PathLike[str]) -> np.ndarray:
    """An RGB image from .npy (H, W, 3), or PNG/JPEG via pillow, or PNG via matplotlib."""
    p = Path(path)
    if p.suffix.lower() == ".npy":
        return read_array(p, "image")
    if not p.is_file():
        raise InputError(f"image file {str(p)!r} does not exist")
    try:
        from PIL import Image
    except ImportError:
        Image = None
    if Image is not None:
        try:
            with Image.open(p) as img:
                return np.asarray(img.convert("RGB"))
        except (OSError, ValueError) as exc:
            raise InputError(f"image file {str(p)!r} could not be read ({exc})") from None
    try:
        import matplotlib.image as mpimg
    except ImportError:
        raise MissingDependencyError("matplotlib", package="geto-lp", extra="plots") from None
    try:
        return np.asarray(mpimg.imread(p))
    except (OSError, ValueError, SyntaxError) as exc:
        raise InputError(f"image file {str(p)!r} could not be read ({exc})") from None


def write_image(path: str | os.PathLike[str], image: np.ndarray) -> None:
    """Write a float [0, 1] or uint8 RGB image as PNG (pillow, else matplotlib), atomically."""
    arr = np.asarray(image)
    if arr.dtype != np.uint8:
        arr = (np.clip(arr, 0.0, 1.0) * 255 + 0.5).astype(np.uint8)
    try:
        from PIL import Image
    except ImportError:
        Image = None
    if Image is not None:
        with atomic_path(path, mode="wb") as handle:
            Image.fromarray(arr).save(handle, format="PNG")
        return
    try:
        import matplotlib.image as mpimg
    except ImportError:
        raise MissingDependencyError("matplotlib", package="geto-lp", extra="plots") from None
    with atomic_path(path, mode="wb") as handle:
        mpimg.imsave(handle, arr, format="png")
