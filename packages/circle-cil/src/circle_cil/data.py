"""Offline data: scikit-learn digits, the generated GlyphCIL dataset, and class-incremental streams.

Images are float32 arrays of shape ``(N, C, H, W)`` with values in [0, 1]; labels are int64 ``(N,)``.

GlyphCIL renders characters (Latin, digits, Greek, Cyrillic, symbols and arrows) with the fonts that
matplotlib ships (DejaVu Sans/Serif/Mono and STIX General, regular/bold/italic), so it needs no
download and is the same on every machine with the same matplotlib. Each sample draws a font that
covers the character, a size, a rotation, a shear, a translation, a stroke width and pixel noise from a
seeded generator.
"""

from __future__ import annotations

import functools
import glob
import os
from dataclasses import dataclass, field

import numpy as np

from papershelf.errors import InputError, check_int, check_number

# 221 characters; similar-looking pairs across scripts (Latin A / Greek Alpha / Cyrillic A, c/C, o/O, ...)
# are left out so that every class is a distinct shape in at least its typical fonts.
GLYPHS = (
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabdefghijkmnqrtuy0123456789"
    "ΓΔΘΛΞΠΣΦΨΩαβγδεζηθικλμνξπρσςτφχψω"
    "БДЖЗИЙЛЦЧШЩЪЫЬЭЮЯбвгджзийклмнптцчшщъыьэюя"
    "+=%&@#$?!*/<>[]{}()~^§¶©®±×÷∞≈≠≤≥√∑∫∂♠♣♥♦★→←↑↓↔⇒⇔∀∃∅∈∉∩∪⊂⊃⊕⊗∧∨¬∴∵∠⊥∥≡∝ℵℏ€£¥¢‰†‡•◊○●□■△▲▽▼◆♪♫☺☼"
)
MAX_GLYPH_CLASSES = len(GLYPHS)


@dataclass
class Dataset:
    """A labelled image set split into train and test parts (shapes ``(N, C, H, W)``, ``(N,)``)."""

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    class_names: list[str] = field(default_factory=list)

    @property
    def n_classes(self) -> int:
        return len(np.unique(self.y_train))

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(int(s) for s in self.X_train.shape[1:])  # type: ignore[return-value]

    def describe(self) -> str:
        c, h, w = self.image_shape
        return (
            f"{self.name}: {self.n_classes} classes, {len(self.y_train)} train / {len(self.y_test)} test "
            f"images of {c}x{h}x{w}"
        )


@dataclass
class Task:
    """One task of a class-incremental stream: its classes and their train/test samples."""

    index: int
    classes: list[int]
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def _split_per_class(X, y, test_fraction: float, rng: np.random.Generator):
    train_idx, test_idx = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_test = max(1, round(test_fraction * len(idx)))
        test_idx.append(idx[:n_test])
        train_idx.append(idx[n_test:])
    tr, te = np.concatenate(train_idx), np.concatenate(test_idx)
    return X[tr], y[tr], X[te], y[te]


def load_digits_dataset(*, test_fraction: float = 0.3, seed: int = 0) -> Dataset:
    """scikit-learn's 8×8 handwritten digits (1797 images, 10 classes) as ``(N, 1, 8, 8)`` in [0, 1]."""
    check_number("test_fraction", test_fraction, low=0, high=1, low_open=True, high_open=True)
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.images.astype(np.float32) / 16.0)[:, None]
    y = d.target.astype(np.int64)
    parts = _split_per_class(X, y, test_fraction, np.random.default_rng(seed))
    return Dataset("digits", *parts, class_names=[str(i) for i in range(10)])


def font_paths() -> list[str]:
    """The TrueType fonts GlyphCIL draws from: the DejaVu and STIX General faces bundled with matplotlib."""
    import matplotlib

    root = os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf")
    paths = sorted(
        glob.glob(os.path.join(root, "DejaVu*.ttf")) + glob.glob(os.path.join(root, "STIXGeneral*.ttf"))
    )
    return [p for p in paths if "Display" not in os.path.basename(p)]


@functools.lru_cache(maxsize=1)
def _coverage() -> dict[str, set[int]]:
    from matplotlib.ft2font import FT2Font

    return {p: set(FT2Font(p).get_charmap()) for p in font_paths()}


def render_glyph(
    char: str,
    font_path: str,
    *,
    size: int = 32,
    rotation: float = 0.0,
    scale: float = 1.0,
    shear: float = 0.0,
    shift: tuple[float, float] = (0.0, 0.0),
    stroke: int = 0,
) -> np.ndarray:
    """Render one character as a ``(size, size)`` float32 image in [0, 1] (white glyph on black).

    The glyph is drawn at 4× resolution, centred on its ink bounding box, fitted to ``0.75·scale`` of the
    frame, then rotated (degrees), sheared, shifted (fractions of the frame) and downsampled.
    """
    from PIL import Image, ImageDraw, ImageFont

    big = 4 * size
    font = ImageFont.truetype(font_path, size=int(big * 0.7))
    canvas = Image.new("L", (2 * big, 2 * big), 0)
    ImageDraw.Draw(canvas).text(
        (big // 2, big // 2), char, fill=255, font=font, stroke_width=stroke * 2, stroke_fill=255
    )
    box = canvas.getbbox()
    if box is None:
        return np.zeros((size, size), np.float32)
    glyph = canvas.crop(box)
    gw, gh = glyph.size
    fit = 0.75 * scale * big / max(gw, gh)
    glyph = glyph.resize((max(1, round(gw * fit)), max(1, round(gh * fit))), Image.BILINEAR)
    frame = Image.new("L", (big, big), 0)
    frame.paste(glyph, ((big - glyph.size[0]) // 2, (big - glyph.size[1]) // 2))
    frame = frame.rotate(rotation, resample=Image.BILINEAR)
    dx, dy = shift[0] * big, shift[1] * big
    frame = frame.transform(
        frame.size,
        Image.AFFINE,
        (1.0, shear, -shear * big / 2 - dx, 0.0, 1.0, -dy),
        resample=Image.BILINEAR,
    )
    return np.asarray(frame.resize((size, size), Image.BOX), dtype=np.float32) / 255.0


@functools.lru_cache(maxsize=4)
def _glyph_cached(n_classes, per_class, size, seed, noise):
    cover = _coverage()
    rng = np.random.default_rng(seed)
    chars = GLYPHS[:n_classes]
    X = np.empty((n_classes * per_class, 1, size, size), np.float32)
    y = np.repeat(np.arange(n_classes, dtype=np.int64), per_class)
    k = 0
    for ch in chars:
        fonts = [p for p, cov in cover.items() if ord(ch) in cov]
        for _ in range(per_class):
            img = render_glyph(
                ch,
                fonts[rng.integers(len(fonts))],
                size=size,
                rotation=float(rng.uniform(-15, 15)),
                scale=float(rng.uniform(0.75, 1.1)),
                shear=float(rng.uniform(-0.2, 0.2)),
                shift=(float(rng.uniform(-0.08, 0.08)), float(rng.uniform(-0.08, 0.08))),
                stroke=int(rng.integers(0, 2)),
            )
            if noise > 0:
                img = img + rng.normal(0.0, noise, img.shape).astype(np.float32)
            X[k, 0] = np.clip(img, 0.0, 1.0)
            k += 1
    return X, y, chars


def glyph_dataset(
    n_classes: int = 200,
    per_class: int = 60,
    *,
    size: int = 32,
    test_fraction: float = 1 / 3,
    noise: float = 0.05,
    seed: int = 0,
) -> Dataset:
    """GlyphCIL: ``n_classes`` rendered characters, ``per_class`` augmented images each, seeded.

    >>> d = glyph_dataset(5, 6, size=16, seed=1)
    >>> d.X_train.shape, d.X_test.shape, d.n_classes
    ((20, 1, 16, 16), (10, 1, 16, 16), 5)
    """
    n_classes = check_int("n_classes", n_classes, low=2, high=MAX_GLYPH_CLASSES)
    per_class = check_int("per_class", per_class, low=2)
    size = check_int("size", size, low=8, high=256)
    check_number("test_fraction", test_fraction, low=0, high=1, low_open=True, high_open=True)
    check_number("noise", noise, low=0, high=1)
    X, y, chars = _glyph_cached(n_classes, per_class, size, seed, float(noise))
    parts = _split_per_class(X, y, test_fraction, np.random.default_rng(seed + 1))
    return Dataset(f"glyph-{n_classes}", *parts, class_names=list(chars))


def load_dataset(name: str, *, seed: int = 0, n_classes: int = 200, per_class: int = 24) -> Dataset:
    """``"digits"`` or ``"glyph"`` (GlyphCIL with ``n_classes`` × ``per_class``)."""
    if name == "digits":
        return load_digits_dataset(seed=seed)
    if name == "glyph":
        return glyph_dataset(n_classes, per_class, seed=seed)
    raise InputError(f"dataset must be 'digits' or 'glyph', got {name!r}")


def class_incremental_stream(dataset: Dataset, n_tasks: int, *, seed: int = 1993) -> list[Task]:
    """Split ``dataset`` into ``n_tasks`` tasks of disjoint classes (cold start: equal-sized tasks).

    The class order is a permutation drawn from ``seed`` (1993, the PyCIL/FACIL convention); classes are
    divided as evenly as possible (``numpy.array_split``), so the first task is no larger than the
    others plus one. Within a task the training samples are shuffled with the same seed.

    >>> d = load_digits_dataset()
    >>> [t.classes for t in class_incremental_stream(d, 5, seed=0)][:2]
    [[4, 6], [2, 7]]
    """
    classes = np.unique(dataset.y_train)
    n_tasks = check_int("n_tasks", n_tasks, low=1)
    if n_tasks > len(classes):
        raise InputError(
            f"n_tasks={n_tasks} exceeds the {len(classes)} classes of {dataset.name}; "
            "a class-incremental task needs at least one new class"
        )
    rng = np.random.default_rng(seed)
    order = rng.permutation(classes)
    tasks = []
    for i, cls in enumerate(np.array_split(order, n_tasks)):
        tr = np.flatnonzero(np.isin(dataset.y_train, cls))
        tr = tr[rng.permutation(len(tr))]
        te = np.flatnonzero(np.isin(dataset.y_test, cls))
        tasks.append(
            Task(
                i,
                [int(c) for c in cls],
                dataset.X_train[tr],
                dataset.y_train[tr],
                dataset.X_test[te],
                dataset.y_test[te],
            )
        )
    return tasks
