"""papershelf — the thin core shared by every paper package on the shelf.

Standard library (plus tqdm) at import; numpy and torch are touched only inside the functions that
need them, and only when they are installed.

Modules: :mod:`errors`, :mod:`cli`, :mod:`bench`, :mod:`repro`, :mod:`device`, :mod:`progress`,
:mod:`hf_folder`, :mod:`testing` (the last one needs pytest and is meant for test suites).
"""

from papershelf.errors import ConfigError, InputError, MissingDependencyError, PapershelfError

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "InputError",
    "MissingDependencyError",
    "PapershelfError",
    "__version__",
]
