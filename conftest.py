"""Shelf-wide pytest hooks: tests marked ``gpu`` are skipped on machines without a CUDA device, and
property tests draw the same examples on every run."""

import pytest

from papershelf.device import cuda_available

try:  # a CI run must be reproducible: a property test that passed yesterday cannot fail today by chance
    from hypothesis import settings

    settings.register_profile("shelf", derandomize=True)
    settings.register_profile("explore", derandomize=False)  # pytest --hypothesis-profile=explore
    settings.load_profile("shelf")
except ImportError:  # hypothesis is a test extra of some packages only
    pass


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in gpu_items:
            item.add_marker(skip)
