import os

# Triton kernels are tested on CPU through the interpreter; it must be chosen before triton is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

# one thread: the tests check correctness, and on a shared 2-core machine a second thread mostly waits
torch.set_num_threads(1)


import pytest  # noqa: E402


@pytest.fixture
def largest_tensor():
    """A context manager class: ``with largest_tensor() as m: ...`` then ``m.largest`` is the element count
    of the largest tensor any torch operation created inside the block."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, tuple | list) else (out,):
                if isinstance(t, torch.Tensor):
                    self.largest = max(self.largest, t.numel())
            return out

    return Largest
