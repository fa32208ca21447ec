"""Write generated images and their labels as PNG files (the ``sample`` command)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from papershelf.errors import InputError, check_int
from papershelf.repro import atomic_write_text
from papershelf_vision import data as D


def _palette(labels: np.ndarray) -> np.ndarray:
    """Label map to RGB: 0 black, others fixed pseudo-random colours."""
    rng = np.random.default_rng(7)
    colours = rng.integers(64, 256, (max(256, int(labels.max()) + 1), 3)).astype(np.uint8)
    colours[0] = 0
    return colours[labels.astype(np.int64)]


def _with_boxes(image: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    from PIL import Image, ImageDraw

    img = Image.fromarray(image if image.ndim == 3 else np.repeat(image[..., None], 3, -1))
    draw = ImageDraw.Draw(img)
    for x0, y0, x1, y1 in boxes.tolist():
        draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=(255, 0, 0))
    return np.asarray(img)


def _save(path: Path, array: np.ndarray) -> Path:
    from PIL import Image

    from papershelf.repro import atomic_path

    with atomic_path(path, mode="wb") as handle:
        Image.fromarray(array).save(handle, format="PNG")
    return path


def write_samples(
    kind: str, folder: str | Path, n: int, seed: int = 0, size: int | None = None
) -> list[Path]:
    from papershelf.repro import check_output_path

    if not str(folder).strip():
        raise InputError("--dir is empty; give a folder")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--dir {folder} exists and is not a folder")
    check_output_path(folder / "sample.png", "--dir")  # a folder that can be made, under no file
    if size is not None:  # 0 is an error, not "the default"
        check_int("--size", size, low=MIN_SIZE.get(kind, 8), high=MAX_SIZE.get(kind, 1024))
    made = not folder.exists()
    try:  # e.g. under /proc: the nearest existing parent passes the access check but takes no folder
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--dir {str(folder)!r} cannot be created ({exc.strerror or exc})") from None
    try:
        try:  # a folder that exists but takes no files (/proc, /sys) is refused before anything is drawn
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe."):
                pass
        except OSError as exc:
            raise InputError(f"--dir {str(folder)!r} cannot be written ({exc.strerror or exc})") from None
        return _write(kind, folder, n, seed, size)
    except BaseException:
        if made and not any(folder.iterdir()):  # leave no empty folder behind a refused request
            folder.rmdir()
        raise


# the smallest --size each kind's generator draws (sparse: objects up to 48 px must fit twice)
MIN_SIZE = {"sparse": 96, "ir": 16}
# the largest (scene, objects, digits, corruptions: 1024; photos: the sample photographs' 427 px height)
MAX_SIZE = {"photos": 427, "ir": 2048, "sparse": D.MAX_SPARSE_SIZE}


def _write(kind: str, folder: Path, n: int, seed: int, size: int | None) -> list[Path]:
    from papershelf_vision.corruptions import KINDS, corrupt

    written: list[Path] = []
    if kind == "scene":
        for i in range(n):
            s = D.scene(seed + i, size or 64)
            d = s.depth
            depth = np.round(255 * (d.max() - d) / (d.max() - d.min() + 1e-9)).astype(
                np.uint8
            )  # near = bright
            written += [
                _save(folder / f"scene{i}_rgb.png", s.image),
                _save(folder / f"scene{i}_semantic.png", _palette(s.semantic)),
                _save(folder / f"scene{i}_instance.png", _palette(s.instance)),
                _save(folder / f"scene{i}_depth.png", depth),
                _save(folder / f"scene{i}_boxes.png", _with_boxes(s.image, s.boxes)),
            ]
            meta = {"boxes": s.boxes.tolist(), "labels": s.names, "object_depth": s.object_depth.tolist()}
            atomic_write_text(folder / f"scene{i}.json", json.dumps(meta) + "\n")  # like the PNGs
            written.append(folder / f"scene{i}.json")
    elif kind == "objects":
        x, y = D.objects(n, D.HELDOUT_CLASSES, size or 32, seed)
        for i in range(n):
            written.append(_save(folder / f"object{i}_{D.HELDOUT_CLASSES[y[i]]}.png", x[i]))
    elif kind == "digits":
        x, y = D.digits("train", size or 32)
        for i in range(n):
            written.append(_save(folder / f"digit{i}_{y[(seed + i) % len(y)]}.png", x[(seed + i) % len(y)]))
    elif kind == "photos":
        for i, im in enumerate(D.photo_patches(n, size or 32, seed)):
            written.append(_save(folder / f"photo{i}.png", im))
    elif kind == "ir":
        for i in range(n):
            s = D.ir_scene(seed + i, size or 128)
            written += [
                _save(folder / f"ir{i}.png", s.image),
                _save(folder / f"ir{i}_mask.png", (s.mask * 255).astype(np.uint8)),
                _save(folder / f"ir{i}_boxes.png", _with_boxes(s.image, s.boxes)),
            ]
    elif kind == "sparse":
        for i in range(n):
            s = D.sparse_scene(seed + i, size or 2048)
            written.append(_save(folder / f"sparse{i}.png", _with_boxes(s.image, s.boxes)))
    elif kind == "corruptions":
        image = D.scene(seed, size or 64).image
        written.append(_save(folder / "clean.png", image))
        for k in KINDS:
            for sev in range(1, 6):
                written.append(_save(folder / f"{k}_{sev}.png", corrupt(image, k, sev, seed)))
    else:
        raise InputError(f"unknown sample kind {kind!r}")
    return written
