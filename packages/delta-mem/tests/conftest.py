import atexit
import os
import shutil
import tempfile

# Triton kernels are tested on CPU through the interpreter; it must be chosen before triton is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")
# the C decode step is built for the test session in a temporary directory, not the user's cache
if "DELTA_MEM_KERNEL_CACHE" not in os.environ:
    os.environ["DELTA_MEM_KERNEL_CACHE"] = tempfile.mkdtemp(prefix="delta-mem-kernel-")
    atexit.register(shutil.rmtree, os.environ["DELTA_MEM_KERNEL_CACHE"], ignore_errors=True)

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def tiny_llama():
    from delta_mem.experiments import random_llama

    return random_llama(0, hidden=32, layers=2)
