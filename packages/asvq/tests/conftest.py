import os

# vector-quantize-pytorch (imported by test_baselines) imports triton. In a pytest process shared with
# packages that test Triton kernels under the interpreter, the mode is fixed by the first triton import,
# so choose it here too (setdefault: an explicit TRITON_INTERPRET=0 on a GPU machine still wins).
os.environ.setdefault("TRITON_INTERPRET", "1")
