"""Shelf-wide pytest hooks: tests marked ``gpu`` are skipped on machines without a CUDA device."""

import pytest

from papershelf.device import cuda_available


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in gpu_items:
            item.add_marker(skip)
