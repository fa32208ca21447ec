"""Offline image corpora with ground truth: procedural scenes, object views, digits, photo patches,
infrared-like small-target scenes, large sparse scenes.

Every generator takes a ``seed`` and is deterministic in it (numpy ``default_rng`` plus PIL drawing,
no global state). Images are ``uint8`` arrays ``(H, W, 3)`` (``(H, W)`` for the infrared scenes).

Scene geometry (:func:`scene`): a background plane whose depth falls linearly from ``far`` at the top
row to ``near`` at the bottom row (a floor seen from above the horizon), and objects that are planar
cut-outs at depths ``z`` nearer than any background point, each with a small depth slope across it.
Every pixel shows the surface with the smallest depth (a z-buffer), so the instance mask, semantic
mask, depth map and boxes all come from one geometry: ``instance[p] = argmin_i depth_i(p)`` over the
objects covering ``p`` (0 = background), ``semantic = labels[instance - 1]`` (0 = background),
``boxes`` are the tight boxes of the *visible* pixels (``x0, y0, x1, y1``, end-exclusive), and an
object hidden entirely by nearer ones is dropped. Apparent size scales as ``1 / z``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from papershelf.errors import InputError

SHAPES = (
    "circle", "square", "triangle", "pentagon", "star", "cross", "ring", "crescent", "rectangle",
    "hexagon", "diamond", "arrow", "semicircle", "heart", "octagon", "trapezoid",
)  # fmt: skip
GLYPHS = tuple("ABCDEFGHKLMNPRSTUVWXYZ")
CLASSES: tuple[str, ...] = SHAPES + tuple(f"glyph-{g}" for g in GLYPHS)
"""Every procedural object class; semantic id of ``CLASSES[i]`` is ``i + 1`` (0 is background)."""

HELDOUT_CLASSES: tuple[str, ...] = (
    "hexagon", "diamond", "arrow", "semicircle", "heart",
    "glyph-M", "glyph-R", "glyph-W", "glyph-Y", "glyph-K",
)  # fmt: skip
"""Classes never drawn in pretraining data; the linear / k-NN probes classify these."""
PRETRAIN_CLASSES: tuple[str, ...] = tuple(c for c in CLASSES if c not in HELDOUT_CLASSES)
SEGMENTATION_CLASSES: tuple[str, ...] = ("circle", "square", "triangle", "star", "cross")
"""Classes of the scenes the per-token segmentation probe is measured on (plus background)."""

MAX_SPARSE_SIZE = 8192


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _check_size(name: str, size, low: int, high: int) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not low <= size <= high:
        raise InputError(f"{name} must be an integer in [{low}, {high}], got {size!r}")
    return int(size)


def _int_range(name: str, value, low: int, high: int) -> tuple[int, int]:
    """A count or an inclusive integer ``(low, high)`` within [low, high]; anything else one error line."""
    pair = (value, value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value
    try:
        lo, hi = pair
    except (TypeError, ValueError):
        raise InputError(
            f"{name} must be a count or (low, high) within [{low}, {high}], got {value!r}"
        ) from None
    ok = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (lo, hi))
    if not ok or not low <= lo <= hi <= high:
        raise InputError(f"{name} must be a count or (low, high) within [{low}, {high}], got {value!r}")
    return int(lo), int(hi)


def _real_range(name: str, value, low: float, high: float) -> tuple[float, float]:
    """A finite ``(low, high)`` pair of reals with ``low_bound < low <= high <= high_bound``."""
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be (low, high) numbers, got {value!r}") from None
    if isinstance(value, (str, bytes)) or not (low < lo <= hi <= high) or not np.isfinite([lo, hi]).all():
        raise InputError(f"{name} must be (low, high) with {low} < low <= high <= {high}, got {value!r}")
    return lo, hi


def class_id(name: str) -> int:
    """Semantic id (1-based) of a class name."""
    if name not in CLASSES:
        raise InputError(f"unknown class {name!r}; known classes: {', '.join(CLASSES)}")
    return CLASSES.index(name) + 1


# ---------------------------------------------------------------------------------------------------
# textures


@functools.cache
def _photos() -> tuple[np.ndarray, ...]:
    """scikit-learn's two sample photographs (china.jpg, flower.jpg: what ``load_sample_images`` returns),
    read straight from the installed package so that importing scikit-learn is not needed."""
    from PIL import Image

    root = _sklearn_dir() / "datasets" / "images"
    photos = []
    for name in ("china.jpg", "flower.jpg"):
        with Image.open(root / name) as im:
            photos.append(np.asarray(im.convert("RGB"), dtype=np.uint8))
    return tuple(photos)


def _resize(img: np.ndarray, h: int, w: int, *, nearest: bool = False) -> np.ndarray:
    from PIL import Image

    resample = Image.NEAREST if nearest else Image.BILINEAR
    if img.ndim == 2 or img.dtype != np.uint8:
        chans = img[..., None] if img.ndim == 2 else img
        out = np.stack(
            [np.asarray(Image.fromarray(chans[..., c].astype(np.float32), mode="F").resize((w, h), resample))
             for c in range(chans.shape[-1])], axis=-1,
        )  # fmt: skip
        return out[..., 0] if img.ndim == 2 else out
    return np.asarray(Image.fromarray(img).resize((w, h), resample))


def _smooth_noise(rng: np.random.Generator, h: int, w: int, cells: int, channels: int = 3) -> np.ndarray:
    """Values in [0, 1]: random values on a ``cells x cells`` lattice, bilinearly upsampled."""
    low = rng.random((cells, cells, channels)).astype(np.float32)
    return np.clip(_resize(low, h, w), 0.0, 1.0)


def texture(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A random texture ``(h, w, 3)`` float32 in [0, 1]: smooth noise, a grating, a checkerboard or a
    patch of one of scikit-learn's sample photographs."""
    kind = rng.integers(4)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    c1, c2 = rng.random(3).astype(np.float32), rng.random(3).astype(np.float32)
    if kind == 0:
        t = _smooth_noise(rng, h, w, int(rng.integers(2, 7)))
        return (0.35 * t + 0.65 * c1 * (0.5 + t)).clip(0, 1)
    if kind == 1:
        theta, period = rng.uniform(0, np.pi), rng.uniform(3, 12)
        phase = np.sin(2 * np.pi * (xx * np.cos(theta) + yy * np.sin(theta)) / period + rng.uniform(0, 6.3))
        a = (0.5 + 0.5 * phase)[..., None]
        return a * c1 + (1 - a) * c2
    if kind == 2:
        cell = rng.uniform(3, 10)
        a = ((np.floor(xx / cell) + np.floor(yy / cell)) % 2)[..., None]
        return a * c1 + (1 - a) * c2
    photo = _photos()[rng.integers(2)]
    short = min(photo.shape[:2])  # 427 px; a texture this large or larger upsamples a crop of that side
    # (drawn only below it, so smaller textures keep their random stream: rng.integers(a, b) needs a < b)
    side = int(rng.integers(max(h, w), short)) if max(h, w) < short else short
    y0, x0 = rng.integers(photo.shape[0] - side + 1), rng.integers(photo.shape[1] - side + 1)
    return _resize(photo[y0 : y0 + side, x0 : x0 + side], h, w).astype(np.float32) / 255.0


# ---------------------------------------------------------------------------------------------------
# shapes


def _regular(n: int, start: float = -np.pi / 2) -> np.ndarray:
    a = start + 2 * np.pi * np.arange(n) / n
    return np.stack([np.cos(a), np.sin(a)], 1)


def _circle_pts(n: int = 48, cx: float = 0.0, cy: float = 0.0, r: float = 1.0, a0=0.0, a1=2 * np.pi):
    a = np.linspace(a0, a1, n, endpoint=False)
    return np.stack([cx + r * np.cos(a), cy + r * np.sin(a)], 1)


def _outline(name: str) -> list[tuple[np.ndarray, int]]:
    """Unit-radius polygons with fill 1 (add) or 0 (cut out), drawn in order."""
    if name == "circle":
        return [(_circle_pts(), 1)]
    if name == "square":
        return [(np.array([[-0.8, -0.8], [0.8, -0.8], [0.8, 0.8], [-0.8, 0.8]]), 1)]
    if name == "rectangle":
        return [(np.array([[-1, -0.5], [1, -0.5], [1, 0.5], [-1, 0.5]]), 1)]
    if name == "triangle":
        return [(_regular(3) * 1.05 + [0, 0.15], 1)]
    if name == "pentagon":
        return [(_regular(5), 1)]
    if name == "hexagon":
        return [(_regular(6, 0.0), 1)]
    if name == "octagon":
        return [(_regular(8, np.pi / 8), 1)]
    if name == "diamond":
        return [(np.array([[0, -1], [0.6, 0], [0, 1], [-0.6, 0]]), 1)]
    if name == "star":
        outer, inner = _regular(5), _regular(5, -np.pi / 2 + np.pi / 5) * 0.42
        return [(np.stack([outer, inner], 1).reshape(-1, 2), 1)]
    if name == "cross":
        a, b = 0.3, 0.95
        pts = [[-a, -b], [a, -b], [a, -a], [b, -a], [b, a], [a, a], [a, b], [-a, b], [-a, a], [-b, a],
               [-b, -a], [-a, -a]]  # fmt: skip
        return [(np.array(pts, float), 1)]
    if name == "ring":
        return [(_circle_pts(), 1), (_circle_pts(r=0.55), 0)]
    if name == "crescent":
        return [(_circle_pts(), 1), (_circle_pts(cx=0.45, cy=-0.2, r=0.85), 0)]
    if name == "semicircle":
        half = np.concatenate([_circle_pts(32, a0=0, a1=np.pi), np.array([[-1.0, 0.0]])])
        return [(half + np.array([0.0, -0.4]), 1)]
    if name == "arrow":
        pts = [[-1, -0.25], [0.2, -0.25], [0.2, -0.65], [1, 0], [0.2, 0.65], [0.2, 0.25], [-1, 0.25]]
        return [(np.array(pts, float), 1)]
    if name == "heart":
        t = np.linspace(0, 2 * np.pi, 64, endpoint=False)
        x = 16 * np.sin(t) ** 3
        y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
        return [(np.stack([x, y], 1) / 16.5, 1)]
    if name == "trapezoid":
        return [(np.array([[-0.5, -0.6], [0.5, -0.6], [1, 0.6], [-1, 0.6]]), 1)]
    raise AssertionError(name)


@functools.cache
def _font(size: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def object_mask(name: str, h: int, w: int, cx: float, cy: float, radius: float, angle: float,
                aspect: float = 1.0) -> np.ndarray:  # fmt: skip
    """Boolean ``(h, w)`` mask of class ``name`` centred at ``(cx, cy)`` with the given radius (pixels),
    rotation (radians) and aspect ratio (x stretched by ``aspect``, y by ``1 / aspect``)."""
    from PIL import Image, ImageDraw

    if name.startswith("glyph-"):
        side = max(4, math.ceil(radius * 2.8))
        canvas = Image.new("L", (side, side), 0)
        draw = ImageDraw.Draw(canvas)
        font = _font(max(4, round(float(radius * 2.4))))
        stroke = max(0, round(float(radius / 5)))  # bold strokes, so that glyphs are shapes, not hairlines
        draw.text((side / 2, side / 2), name[-1], fill=255, font=font, anchor="mm", stroke_width=stroke,
                  stroke_fill=255)  # fmt: skip
        if aspect != 1.0:
            canvas = canvas.resize(
                (max(1, round(side * aspect)), max(1, round(side / aspect))), Image.NEAREST
            )
        canvas = canvas.rotate(math.degrees(-angle), resample=Image.NEAREST, expand=True)
        glyph = np.asarray(canvas) > 127
        out = np.zeros((h, w), bool)
        gy, gx = glyph.shape
        y0, x0 = round(float(cy - gy / 2)), round(float(cx - gx / 2))
        ys, xs = max(0, y0), max(0, x0)
        ye, xe = min(h, y0 + gy), min(w, x0 + gx)
        if ye > ys and xe > xs:
            out[ys:ye, xs:xe] = glyph[ys - y0 : ye - y0, xs - x0 : xe - x0]
        return out
    img = Image.new("L", (w, h), 0)
    draw = ImageDraw.Draw(img)
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    for pts, fill in _outline(name):
        p = (pts * [aspect, 1.0 / aspect]) @ rot.T * radius + [cx, cy]
        draw.polygon([tuple(q) for q in p], fill=255 * fill)
    return np.asarray(img) > 127


# ---------------------------------------------------------------------------------------------------
# scenes


@dataclass
class Scene:
    """One rendered scene and its ground truth (see the module docstring for the geometry)."""

    image: np.ndarray  # (H, W, 3) uint8
    semantic: np.ndarray  # (H, W) int16, 0 = background, CLASSES[i] -> i + 1
    instance: np.ndarray  # (H, W) int16, 0 = background, object k -> k + 1
    boxes: np.ndarray  # (n, 4) int32, x0, y0, x1, y1 of the visible pixels, end-exclusive
    labels: np.ndarray  # (n,) int64 semantic ids
    depth: np.ndarray  # (H, W) float32, distance along the view axis
    object_depth: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # (n,) centre depths

    @property
    def names(self) -> list[str]:
        return [CLASSES[i - 1] for i in self.labels]


BG_FAR, BG_NEAR = 10.0, 6.0  # background plane depth at the top and bottom row
Z_RANGE = (1.5, 5.0)  # object depths; all nearer than the background
FOCAL = 0.45  # apparent radius = FOCAL * size * physical_radius / z


def background_depth(h: int, w: int) -> np.ndarray:
    rows = np.linspace(BG_FAR, BG_NEAR, h, dtype=np.float32)
    return np.repeat(rows[:, None], w, axis=1)


def _render(rng: np.random.Generator, size: int, classes, n_objects: int, centred: bool,
            look: np.random.Generator | None = None) -> Scene:  # fmt: skip
    """Draw a scene. Geometry (classes, depth, pose, masks) comes from ``rng``; appearance (background
    texture, object colour and texture) from ``look``, which defaults to ``rng`` itself (one stream).
    A separate ``look`` re-renders the same geometry with another appearance."""
    look = rng if look is None else look
    h = w = size
    bg = texture(look, h, w)
    if centred:  # object views: a calmer background, so that the object's shape is what stands out
        bg = bg.mean(axis=(0, 1)) + 0.4 * (bg - bg.mean(axis=(0, 1)))
    image = bg.copy()
    depth = background_depth(h, w)
    instance = np.zeros((h, w), np.int16)
    labels, zs = [], []
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    for k in range(n_objects):
        name = classes[rng.integers(len(classes))]
        z = rng.uniform(*Z_RANGE) if not centred else rng.uniform(1.3, 2.0)
        radius = FOCAL * size * rng.uniform(0.7, 1.3) / z
        if centred:
            cx, cy = (size / 2 + rng.normal(0, size * 0.06, 2)).tolist()
        else:
            cx, cy = rng.uniform(0.1 * size, 0.9 * size, 2).tolist()
        mask = object_mask(name, h, w, cx, cy, radius, rng.uniform(0, 2 * np.pi), rng.uniform(0.8, 1.25))
        if not mask.any():
            continue
        gx, gy = rng.normal(0, 0.1 / max(radius, 1.0), 2)  # a gentle slant, |dz| < ~0.3 across the object
        zfield = (z + gx * (xx - cx) + gy * (yy - cy)).astype(np.float32)
        visible = mask & (zfield < depth)
        colour = look.random(3).astype(np.float32)
        for _ in range(10 if centred else 0):  # object views: a colour that differs from the background
            if np.abs(colour - bg.mean(axis=(0, 1))).max() > 0.35:
                break
            colour = look.random(3).astype(np.float32)
        tex = texture(look, h, w)
        shade = 0.55 + 0.45 * (1.0 - (z - Z_RANGE[0]) / (Z_RANGE[1] - Z_RANGE[0]))  # nearer is brighter
        obj = np.clip((0.75 * colour + 0.25 * tex) * (0.6 + 0.4 * shade), 0, 1)
        image[visible] = obj[visible]
        depth[visible] = zfield[visible]
        instance[visible] = k + 1
        labels.append(class_id(name))
        zs.append(z)
    # renumber the instances that are still visible, dropping the fully hidden ones
    boxes, kept, kept_z = [], [], []
    new = np.zeros_like(instance)
    for k in range(1, len(labels) + 1):
        m = instance == k
        if not m.any():
            continue
        ys, xs = np.nonzero(m)
        boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
        kept.append(labels[k - 1])
        kept_z.append(zs[k - 1])
        new[m] = len(kept)
    lab = np.asarray(kept, np.int64)
    semantic = np.zeros((h, w), np.int16)
    if len(lab):
        semantic[new > 0] = lab[new[new > 0] - 1]
    return Scene(
        image=np.round(image * 255).astype(np.uint8),
        semantic=semantic,
        instance=new,
        boxes=np.asarray(boxes, np.int32).reshape(-1, 4),
        labels=lab,
        depth=depth,
        object_depth=np.asarray(kept_z, np.float32),
    )


def _check_classes(classes) -> tuple[str, ...]:
    if isinstance(classes, str) or not hasattr(classes, "__iter__"):  # "cat" would become c, a, t
        raise InputError(f"classes must be a sequence of class names, got {classes!r}")
    if isinstance(classes, set | frozenset):  # iteration order follows string hashes: not reproducible
        raise InputError(
            f"classes must be an ordered sequence (a list or tuple), not a {type(classes).__name__}: a set's "
            "order changes between processes, and with it every draw and label"
        )
    classes = tuple(classes)
    if not classes:
        raise InputError("classes must name at least one class")
    for c in classes:
        class_id(c)
    return classes


def scene(seed: int, size: int = 64, *, n_objects: int | tuple[int, int] = (2, 6),
          classes=PRETRAIN_CLASSES, look_seed: int | None = None) -> Scene:  # fmt: skip
    """A procedural scene: textured background plane, ``n_objects`` shapes / glyphs at random scale,
    pose, colour and depth, with occlusion. ``n_objects`` is a count or an inclusive ``(low, high)``.
    ``look_seed`` (optional) draws the appearance from its own stream: the same ``seed`` with two look
    seeds gives the same geometry and masks in two different colourings and textures."""
    rng = np.random.default_rng(_check_seed(seed))
    look = None if look_seed is None else np.random.default_rng(_check_seed(look_seed))
    size = _check_size("size", size, 8, 1024)
    lo, hi = _int_range("n_objects", n_objects, 0, 64)
    n = int(rng.integers(lo, hi + 1))
    return _render(rng, size, _check_classes(classes), n, centred=False, look=look)


def object_view(seed: int, name: str, size: int = 32, *, look_seed: int | None = None) -> np.ndarray:
    """One object of class ``name`` near the centre of a textured background; ``(size, size, 3)`` uint8.
    ``look_seed`` as in :func:`scene`: same pose and shape, another appearance."""
    rng = np.random.default_rng(_check_seed(seed))
    look = None if look_seed is None else np.random.default_rng(_check_seed(look_seed))
    size = _check_size("size", size, 8, 1024)
    class_id(name)
    for _ in range(8):  # glyph masks can be empty at tiny sizes: redraw
        s = _render(rng, size, (name,), 1, centred=True, look=look)
        if len(s.labels):
            return s.image
    raise InputError(f"size {size} is too small to draw {name!r}")


def objects(n: int, classes=HELDOUT_CLASSES, size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` object views, classes balanced and shuffled: ``(images (n, size, size, 3) uint8, labels)``
    with labels the index into ``classes``."""
    classes = _check_classes(classes)
    n = _check_size("n", n, 1, 10**6)
    rng = np.random.default_rng(_check_seed(seed))
    labels = rng.permutation(np.arange(n) % len(classes))
    seeds = rng.integers(0, 2**63 - 1, n)
    images = np.stack([object_view(int(s), classes[y], size) for s, y in zip(seeds, labels)])
    return images, labels.astype(np.int64)


@functools.cache
def _digits() -> tuple[np.ndarray, np.ndarray]:
    """``load_digits()``'s images and targets, read from the file scikit-learn ships (no sklearn import)."""
    data = np.loadtxt(_sklearn_dir() / "datasets" / "data" / "digits.csv.gz", delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)


def _sklearn_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("scikit-learn is not installed; its bundled data are needed")
    return Path(spec.submodule_search_locations[0])


def digits(split: str = "train", size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits (1797 images) as ``(n, size, size, 3)`` uint8, white on black,
    bilinearly upsampled; a fixed split: ``train`` = the first 1000, ``test`` = the remaining 797."""
    if split not in ("train", "test"):
        raise InputError(f"split must be 'train' or 'test', got {split!r}")
    size = _check_size("size", size, 8, 1024)
    images, target = _digits()
    sel = slice(0, 1000) if split == "train" else slice(1000, None)
    imgs = images[sel].astype(np.float32) / 16.0
    up = np.stack([_resize(im, size, size) for im in imgs]).clip(0, 1)
    return np.repeat(np.round(up * 255).astype(np.uint8)[..., None], 3, axis=-1), target[sel].astype(np.int64)


def photo_patches(n: int, size: int = 32, seed: int = 0, *, scale: tuple[float, float] = (0.05, 0.3)):
    """``n`` random square crops of scikit-learn's two sample photographs (china, flower), side a
    ``scale`` fraction of the photo height, resized to ``size``; ``(n, size, size, 3)`` uint8."""
    rng = np.random.default_rng(_check_seed(seed))
    n = _check_size("n", n, 1, 10**6)
    size = _check_size("size", size, 8, 427)
    scale = _real_range("scale", scale, 0.0, 1.0)  # a fraction of the photo's height
    out = np.empty((n, size, size, 3), np.uint8)
    for i in range(n):
        photo = _photos()[rng.integers(2)]
        side = max(size // 4, int(rng.uniform(*scale) * photo.shape[0]))
        y0, x0 = rng.integers(photo.shape[0] - side + 1), rng.integers(photo.shape[1] - side + 1)
        out[i] = _resize(photo[y0 : y0 + side, x0 : x0 + side], size, size)
    return out


# ---------------------------------------------------------------------------------------------------
# infrared-like small targets


@dataclass
class IRScene:
    """A single-channel infrared-like frame with faint point targets."""

    image: np.ndarray  # (H, W) uint8
    mask: np.ndarray  # (H, W) bool: target pixels (intensity above half the target's peak)
    boxes: np.ndarray  # (n, 4) int32, x0, y0, x1, y1, end-exclusive
    centers: np.ndarray  # (n, 2) float32, x, y (sub-pixel)
    snr: np.ndarray  # (n,) float32, peak over the background's standard deviation


def _pink_noise(rng: np.random.Generator, h: int, w: int, beta: float = 1.8) -> np.ndarray:
    fy, fx = np.fft.fftfreq(h)[:, None], np.fft.rfftfreq(w)[None, :]
    f = np.sqrt(fx**2 + fy**2)
    f[0, 0] = 1.0
    spectrum = (rng.normal(size=f.shape) + 1j * rng.normal(size=f.shape)) / f ** (beta / 2)
    spectrum[0, 0] = 0.0
    x = np.fft.irfft2(spectrum, s=(h, w))
    return ((x - x.mean()) / (x.std() + 1e-12)).astype(np.float32)


def ir_scene(seed: int, size: int = 128, *, n_targets: int | tuple[int, int] = (1, 4),
             snr: tuple[float, float] = (2.0, 6.0)) -> IRScene:  # fmt: skip
    """Faint Gaussian targets (sigma 0.5–1.2 px, at most ~7x7 px above half-peak) on cluttered
    1/f background with cloud-like gradients and bright structured clutter (edges, blobs). The number of
    targets is drawn from ``n_targets``; a target that would touch an earlier one is dropped (so masks
    stay one component per target), so a crowded frame can hold fewer than drawn: ``len(boxes)`` is the
    truth."""
    rng = np.random.default_rng(_check_seed(seed))
    size = _check_size("size", size, 16, 2048)
    lo, hi = _int_range("n_targets", n_targets, 0, 256)
    snr = _real_range("snr", snr, 0.0, 1e6)
    h = w = size
    clutter = _pink_noise(rng, h, w) * 0.6 + _smooth_noise(rng, h, w, 3, 1)[..., 0] * 2.0
    for _ in range(int(rng.integers(1, 4))):  # bright structures: horizon-like edges and large blobs
        yy, xx = np.mgrid[0:h, 0:w]
        if rng.random() < 0.5:
            clutter += 1.5 * (yy > rng.uniform(0.3, 0.9) * h + 0.2 * (xx - w / 2) * rng.normal())
        else:
            c, r = rng.uniform(0, size, 2), rng.uniform(0.05, 0.2) * size
            clutter += 1.2 * np.exp(-((xx - c[0]) ** 2 + (yy - c[1]) ** 2) / (2 * r**2))
    sensor = rng.normal(0, 0.25, (h, w)).astype(np.float32)
    frame = clutter + sensor
    local_std = float(np.std(np.diff(frame, axis=1)) / np.sqrt(2))  # high-pass noise level
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    targets = np.zeros((h, w), np.float32)
    mask = np.zeros((h, w), bool)
    boxes, centers, snrs = [], [], []
    for _ in range(int(rng.integers(lo, hi + 1))):
        cx, cy = rng.uniform(4, w - 4), rng.uniform(4, h - 4)
        sigma, s = rng.uniform(0.5, 1.2), rng.uniform(*snr)
        blob = s * local_std * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * sigma**2))
        m = blob >= 0.5 * blob.max()
        m[round(float(cy)) if round(float(cy)) < h else h - 1, min(round(float(cx)), w - 1)] = True
        if (mask & m).any():  # keep targets apart so every mask component is one target
            continue
        targets += blob
        mask |= m
        ys, xs = np.nonzero(m)
        boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
        centers.append([cx, cy])
        snrs.append(s)
    frame = frame + targets
    lo_v, hi_v = np.percentile(frame, 0.5), np.percentile(frame, 99.9)
    image = np.clip((frame - lo_v) / (hi_v - lo_v + 1e-9) * 255, 0, 255).round().astype(np.uint8)
    return IRScene(image, mask, np.asarray(boxes, np.int32).reshape(-1, 4),
                   np.asarray(centers, np.float32).reshape(-1, 2), np.asarray(snrs, np.float32))  # fmt: skip


# ---------------------------------------------------------------------------------------------------
# large sparse scenes


@dataclass
class SparseScene:
    """A large, mostly empty image with a few small objects (gigapixel-style detection)."""

    image: np.ndarray  # (S, S, 3) uint8
    boxes: np.ndarray  # (n, 4) int32, x0, y0, x1, y1, end-exclusive, never overlapping
    labels: np.ndarray  # (n,) int64 semantic ids


def sparse_scene(seed: int, size: int = 2048, *, n_objects: int = 12,
                 object_size: tuple[int, int] = (12, 48),
                 classes=PRETRAIN_CLASSES) -> SparseScene:  # fmt: skip
    """A ``size x size`` smooth-textured canvas (up to 8192) with ``n_objects`` non-overlapping objects
    whose boxes are ``object_size`` pixels on a side: far under 1% of the area for the defaults. Objects
    are placed by rejection (20 tries per object); a canvas too crowded for that is an error."""
    rng = np.random.default_rng(_check_seed(seed))
    size = _check_size("size", size, 64, MAX_SPARSE_SIZE)
    n_objects = _check_size("n_objects", n_objects, 0, 4096)
    lo, hi = _int_range("object_size", object_size, 4, size // 2)
    classes = _check_classes(classes)
    base = (texture(rng, 64, 64) * 0.5 + 0.25).astype(np.float32)
    image = np.round(_resize(base, size, size) * 255).clip(0, 255).astype(np.uint8)
    occupied: list[tuple[int, int, int, int]] = []
    boxes, labels = [], []
    for _ in range(n_objects * 20):
        if len(boxes) == n_objects:
            break
        side = int(rng.integers(lo, hi + 1))
        x0, y0 = int(rng.integers(0, size - side)), int(rng.integers(0, size - side))
        if any(x0 < b[2] and b[0] < x0 + side and y0 < b[3] and b[1] < y0 + side for b in occupied):
            continue
        name = classes[rng.integers(len(classes))]
        m = object_mask(name, side, side, side / 2, side / 2, side * 0.45, rng.uniform(0, 2 * np.pi))
        if not m.any():
            continue
        ys, xs = np.nonzero(m)
        patch = image[y0 : y0 + side, x0 : x0 + side]
        patch[m] = (rng.random(3) * 255).astype(np.uint8)
        occupied.append((x0, y0, x0 + side, y0 + side))
        boxes.append([x0 + xs.min(), y0 + ys.min(), x0 + xs.max() + 1, y0 + ys.max() + 1])
        labels.append(class_id(name))
    if len(boxes) < n_objects:  # it returned fewer objects than asked, silently
        raise InputError(
            f"sparse_scene: only {len(boxes)} of n_objects={n_objects} non-overlapping objects of "
            f"{lo}-{hi} px fit a {size} px canvas in {n_objects * 20} tries; lower n_objects or object_size"
        )
    return SparseScene(image, np.asarray(boxes, np.int32).reshape(-1, 4), np.asarray(labels, np.int64))
