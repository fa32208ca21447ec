"""papershelf-vision: the vision testbed: procedural images, dense labels, small self-supervised backbones."""

__version__ = "0.0.1"

from importlib import import_module as _import_module

_LAZY = {
    "load": "papershelf_vision.models",
    "build": "papershelf_vision.models",
    "checkpoint_names": "papershelf_vision.models",
    "to_tensor": "papershelf_vision.models",
    "PRESETS": "papershelf_vision.presets",
    "corrupt": "papershelf_vision.corruptions",
    "scene": "papershelf_vision.data",
    "objects": "papershelf_vision.data",
    "digits": "papershelf_vision.data",
    "ir_scene": "papershelf_vision.data",
    "sparse_scene": "papershelf_vision.data",
    "photo_patches": "papershelf_vision.data",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(_import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'papershelf_vision' has no attribute {name!r}")
