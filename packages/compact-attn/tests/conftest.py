import os

# Triton kernels are tested on CPU through the interpreter; it must be chosen before triton is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

# one thread: the tests check correctness, and on a shared 2-core machine a second thread mostly waits
torch.set_num_threads(1)
