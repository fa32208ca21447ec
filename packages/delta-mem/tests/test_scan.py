import pytest
import torch
from delta_mem.reference import scan_reference
from delta_mem.scan import gate_coefficients, scan, scan_chunked, scan_recurrent

from papershelf.errors import InputError


def _inputs(B=2, H=2, T=13, dk=5, dv=3, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(B, H, T, dk, generator=g, dtype=dtype), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, H, T, dk, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(B, H, T, dv, generator=g, dtype=dtype)
    keep, erase, write = (torch.rand(B, H, T, dv, generator=g, dtype=dtype) for _ in range(3))
    S0 = torch.randn(B, H, dv, dk, generator=g, dtype=dtype)
    return q, k, v, keep, erase, write, S0


@pytest.mark.parametrize("T,chunk", [(13, 4), (16, 4), (5, 32), (1, 1), (9, 9)])
def test_loop_and_chunked_equal_reference(T, chunk):
    args = _inputs(T=T)
    r0, s0 = scan_reference(*args)
    r1, s1 = scan_recurrent(*args)
    r2, s2 = scan_chunked(*args, chunk=chunk)
    torch.testing.assert_close(r1, r0, rtol=0, atol=1e-12)
    torch.testing.assert_close(s1, s0, rtol=0, atol=1e-12)
    torch.testing.assert_close(r2, r0, rtol=0, atol=1e-12)
    torch.testing.assert_close(s2, s0, rtol=0, atol=1e-12)


def test_triton_kernel_equals_reference_under_interpreter():
    from delta_mem.kernels import scan_triton

    args = _inputs(B=1, H=2, T=7, dk=4, dv=3, seed=1)
    r0, s0 = scan_reference(*args)
    r, s = scan_triton(*args, chunk=3)
    torch.testing.assert_close(r, r0, rtol=0, atol=1e-5)
    torch.testing.assert_close(s, s0, rtol=0, atol=1e-5)
    r, s = scan_triton(*args[:-1], None, chunk=4)  # empty start state, non-power-of-two d_k padding
    r0, s0 = scan_reference(*args[:-1], None)
    torch.testing.assert_close(r, r0, rtol=0, atol=1e-5)


def test_chunked_gradients_equal_loop_gradients():
    args = [a.clone().requires_grad_(True) for a in _inputs(T=10)]
    r, s = scan_chunked(*args, chunk=4)
    g1 = torch.autograd.grad((r.sin().sum() + s.cos().sum()), args)
    args2 = [a.detach().clone().requires_grad_(True) for a in args]
    r, s = scan_recurrent(*args2)
    g2 = torch.autograd.grad((r.sin().sum() + s.cos().sum()), args2)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_delta_rule_known_answer_orthonormal_keys_beta_one():
    d = 6
    g = torch.Generator().manual_seed(3)
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    keys = Q.T[:4]  # four orthonormal keys
    vals = torch.randn(4, d, generator=g, dtype=torch.float64)
    k = keys[None, None]
    v = vals[None, None]
    ones = torch.ones(1, 1, 4, d, dtype=torch.float64)
    keep, erase, write = gate_coefficients(ones, torch.zeros_like(ones), "no_lambda")  # β = 1, λ = 1
    S0 = torch.randn(1, 1, d, d, generator=g, dtype=torch.float64)  # whatever was there before
    for fn in (scan_reference, scan_recurrent, lambda *a: scan_chunked(*a, chunk=3)):
        _, S = fn(k, k, v, keep, erase, write, S0)
        for i in range(4):
            torch.testing.assert_close(S[0, 0] @ keys[i], vals[i], rtol=0, atol=1e-6)
    # rewriting key 1 replaces its value and leaves the others
    new = torch.randn(1, 1, 1, d, generator=g, dtype=torch.float64)
    one = torch.ones(1, 1, 1, d, dtype=torch.float64)
    _, S2 = scan_reference(keys[1][None, None, None], keys[1][None, None, None], new, one, one, one, S)
    torch.testing.assert_close(S2[0, 0] @ keys[1], new[0, 0, 0], rtol=0, atol=1e-6)
    for i in (0, 2, 3):
        torch.testing.assert_close(S2[0, 0] @ keys[i], vals[i], rtol=0, atol=1e-6)


def test_read_at_t_does_not_depend_on_the_write_at_t():
    q, k, v, keep, erase, write, S0 = _inputs(T=9)
    t = 5
    r0, _ = scan_chunked(q, k, v, keep, erase, write, S0, chunk=4)
    k2, v2, w2 = k.clone(), v.clone(), write.clone()
    k2[:, :, t] = torch.nn.functional.normalize(torch.randn_like(k2[:, :, t]), dim=-1)
    v2[:, :, t] += 5.0
    w2[:, :, t] = 1.0
    r1, _ = scan_chunked(q, k2, v2, keep, erase, w2, S0, chunk=4)
    torch.testing.assert_close(r1[:, :, : t + 1], r0[:, :, : t + 1], rtol=0, atol=0)
    assert (r1[:, :, t + 1] - r0[:, :, t + 1]).abs().max() > 1e-3  # ... but step t+1 sees it


def test_gate_modes():
    beta = torch.tensor([0.25, 0.5])
    lam = torch.tensor([0.9, 0.8])
    keep, erase, write = gate_coefficients(beta, lam, "standard")
    assert keep is lam and erase is beta and write is beta
    keep, erase, write = gate_coefficients(beta, lam, "lambda_outside")
    torch.testing.assert_close(erase, lam * beta)
    keep, erase, write = gate_coefficients(beta, lam, "no_lambda")
    assert keep.tolist() == [1.0, 1.0]
    with pytest.raises(InputError, match="state_update_mode"):
        gate_coefficients(beta, lam, "bogus")


def test_bad_shapes_and_backend():
    q, k, v, keep, erase, write, S0 = _inputs()
    with pytest.raises(InputError, match="S0"):
        scan_recurrent(q, k, v, keep, erase, write, S0[..., :2])
    with pytest.raises(InputError, match="keep"):
        scan_chunked(q, k, v, keep[..., :2], erase, write)
    with pytest.raises(InputError, match="backend"):
        scan(q, k, v, keep, erase, write, backend="cuda-magic")


def test_scan_inputs_must_share_one_float_dtype():
    q, k, v, keep, erase, write, S0 = _inputs()
    fns = (scan_reference, scan_recurrent, lambda *a: scan_chunked(*a, chunk=4))
    for fn in fns:  # the loop used to promote silently, the reference to fail inside a matmul
        with pytest.raises(InputError, match="dtype"):
            fn(q.float(), k.float(), v, keep.float(), erase.float(), write.float())
        with pytest.raises(InputError, match="S0"):
            fn(q, k, v, keep, erase, write, S0.float())
        with pytest.raises(InputError, match="floating-point"):  # integers gave an all-zero scan
            fn(q.long(), k.long(), v.long(), keep.long(), erase.long(), write.long())


def test_triton_scan_refuses_gradients_and_cpu_without_interpreter(monkeypatch):
    from delta_mem.kernels import scan_triton

    args = list(_inputs(B=1, H=1, T=4, dk=4, dv=4))
    args[0] = args[0].clone().requires_grad_(True)
    with pytest.raises(InputError, match="forward-only"):  # it returned reads with no graph
        scan_triton(*args)
    with pytest.raises(InputError, match="forward-only"):
        scan(*args, backend="triton")
    with torch.no_grad():
        scan_triton(*args, chunk=2)  # inference is fine
        monkeypatch.delenv("TRITON_INTERPRET")
        with pytest.raises(InputError, match="CUDA tensors"):  # was a RuntimeError from Triton's driver
            scan_triton(*args, chunk=2)


def test_scan_refuses_nan_and_inf_naming_the_input():
    q, k, v, keep, erase, write, S0 = _inputs()
    fns = (scan_reference, scan_recurrent, lambda *a: scan_chunked(*a, chunk=4))
    for fn in fns:  # a NaN used to enter the state and come back as NaN reads, far from its cause
        bad_v = v.clone()
        bad_v[0, 0, 1, 0] = float("nan")
        with pytest.raises(InputError, match=r"finite.*v"):
            fn(q, k, bad_v, keep, erase, write)
        with pytest.raises(InputError, match=r"finite.*S0"):
            fn(q, k, v, keep, erase, write, torch.full_like(S0, float("inf")))
