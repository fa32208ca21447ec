import os

# Triton kernels are tested on CPU through the interpreter; it must be chosen before triton is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def tiny_llama():
    from delta_mem.experiments import random_llama

    return random_llama(0, hidden=32, layers=2)
