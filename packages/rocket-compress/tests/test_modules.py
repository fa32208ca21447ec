"""FactorizedLinear equals the dense product; the Triton kernel equals torch under the interpreter."""

import os

import pytest
import torch
from rocket_compress import FactorizedLinear
from rocket_compress.kernels.ell_matmul import ell_matmul_torch


def _factors(d1=20, d2=14, k=8, nnz=3, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(d1, k, generator=g, dtype=dtype)
    B = torch.randn(k, d2, generator=g, dtype=dtype)
    mask = torch.zeros(k, d2, dtype=torch.bool)
    mask.scatter_(0, torch.rand(k, d2, generator=g).argsort(0)[:nnz], True)
    mask[:, 0] = False  # one column keeps a single entry: uneven counts need padding
    mask[5, 0] = True
    return A, B * mask, mask


def test_factorized_linear_equals_dense_product():
    A, B, mask = _factors()
    bias = torch.randn(14, dtype=torch.float64)
    mod = FactorizedLinear.from_factors(A, B, mask, bias, dtype=torch.float64)
    x = torch.randn(3, 5, 20, dtype=torch.float64)
    torch.testing.assert_close(mod(x), x @ (A @ B) + bias, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(mod.dense_weight(), (A @ B).T, rtol=1e-12, atol=1e-12)


def test_parameter_accounting():
    A, B, mask = _factors()
    mod = FactorizedLinear.from_factors(A, B, mask, None, dtype=torch.float64)
    assert mod.n_params == 20 * 8 + int(mask.sum())
    assert mod.index_entries == int(mask.sum())
    assert mod.width == int(mask.sum(0).max())
    dense_b = FactorizedLinear.from_factors(A, torch.randn(8, 14, dtype=torch.float64), None)
    assert dense_b.n_params == 8 * (20 + 14) and dense_b.index_entries == 0


pytest.importorskip("triton")


@pytest.fixture
def interpreted(monkeypatch):
    from rocket_compress.kernels import ell_matmul as mod

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("TRITON_INTERPRET was set to something else before the session")
    monkeypatch.setattr(mod, "_KERNEL", None)
    yield mod
    mod._KERNEL = None


def test_triton_kernel_under_the_interpreter_equals_torch(interpreted):
    for seed, (M, k, n, nnz) in enumerate([(9, 8, 14, 3)]):
        A, B, mask = _factors(d1=12, d2=n, k=k, nnz=nnz, seed=seed, dtype=torch.float32)
        mod = FactorizedLinear.from_factors(A, B, mask, torch.randn(n))
        h = torch.randn(M, k)
        want = ell_matmul_torch(h, mod.b_values, mod.b_index, mod.bias)
        got = interpreted.ell_matmul_triton(h, mod.b_values, mod.b_index, mod.bias, block_m=8, block_n=16)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        mod.backend = "triton"
        x = torch.randn(2, M, 12)
        torch.testing.assert_close(mod(x), x @ (A @ B) + mod.bias, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_triton_kernel_on_cuda_equals_torch():
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("the interpreter is on; run with TRITON_INTERPRET=0 on a GPU")
    from rocket_compress.kernels.ell_matmul import ell_matmul_triton

    A, B, mask = _factors(d1=64, d2=300, k=96, nnz=40, seed=7, dtype=torch.float32)
    mod = FactorizedLinear.from_factors(A, B, mask, torch.randn(300)).cuda()
    h = torch.randn(257, 96, device="cuda")
    want = ell_matmul_torch(h, mod.b_values, mod.b_index, mod.bias)
    torch.testing.assert_close(
        ell_matmul_triton(h, mod.b_values, mod.b_index, mod.bias), want, rtol=1e-4, atol=1e-4
    )
