"""The closed-form chunk transition against the per-token loop (float64), and its special cases."""

import pytest
import torch
from e2ttt.baselines import chunk_average_update, no_momentum_update
from e2ttt.chunk import chunked_memory, e2ttt_chunk_update, per_token_chunk_update, token_weights
from e2ttt.reference import chunk_loop, gd_momentum_tokenwise, sequence_loop, token_gradients
from e2ttt.testing import DT, problem, rel


def close(a, b, rtol=1e-12):
    assert float((a - b).norm() / b.norm()) < rtol


@pytest.mark.parametrize(
    "variant,L", [("mlp", 1), ("mlp", 16), ("mlp", 512), ("swiglu", 1), ("swiglu", 16), ("linear", 16)]
)
def test_closed_form_equals_per_token_loop(variant, L):
    small = L == 512
    args = problem(variant, B=1 if small else 2, H=2, d=3 if small else 4, dh=4 if small else 6, L=L, seed=L)
    W1, m1 = e2ttt_chunk_update(*args, validate=True)
    W2, m2 = chunk_loop(*args)
    assert rel(W1, W2) < 1e-10 and rel(m1, m2) < 1e-10
    W3, m3 = per_token_chunk_update(*args)  # the optimised sequential loop (benchmarked) agrees too
    assert rel(W3, W2) < 1e-10 and rel(m3, m2) < 1e-10


def test_the_loop_is_not_trivially_equal():
    """Guard: permuting the gates in time changes the result, so the tests above see the temporal order."""
    fw, W, m, k, v, lr, lg, lb, lw, lb_ = problem(L=16)
    W1, _ = e2ttt_chunk_update(fw, W, m, k, v, lr, lg, lb, lw, lb_)
    W2, _ = e2ttt_chunk_update(fw, W, m, k, v, lr, lg, lb.flip(-1), lw, lb_)
    assert rel(W1, W2) > 1e-3


def test_token_weights_match_the_products():
    g = torch.Generator().manual_seed(3)
    L = 12
    beta, gamma = torch.rand(L, generator=g, dtype=DT), torch.rand(L, generator=g, dtype=DT)
    tw = token_weights(gamma.log()[None, None], beta.log()[None, None])

    def prod(x, lo, hi):  # ∏_{j=lo}^{hi} x_j (empty = 1)
        return torch.prod(x[lo : hi + 1]) if hi >= lo else torch.tensor(1.0, dtype=DT)

    alpha = [sum(prod(gamma, q + 1, L - 1) * prod(beta, i + 1, q) for q in range(i, L)) for i in range(L)]
    carry_m = sum(prod(gamma, q + 1, L - 1) * prod(beta, 0, q) for q in range(L))
    close(tw.w_W[0, 0], torch.stack(alpha))
    close(tw.w_m[0, 0], torch.stack([prod(beta, i + 1, L - 1) for i in range(L)]))
    close(tw.carry_u[0, 0], torch.prod(gamma))
    close(tw.carry_m[0, 0], carry_m)


def test_chunk_size_one_is_tokenwise_gd_with_momentum():
    fw, W, m, k, v, lr, lg, lb, lw, lb_ = problem(L=20, seed=5)
    Wc, mc = W, m
    for t in range(20):
        sl = slice(t, t + 1)
        Wc, mc = e2ttt_chunk_update(
            fw, Wc, mc, k[:, :, sl], v[:, :, sl], lr[..., sl], lg[..., sl], lb[..., sl], lw, lb_
        )
    Wr, mr = gd_momentum_tokenwise(fw, W, m, k, v, lr, lg, lb, lw, lb_)
    assert rel(Wc, Wr) < 1e-10 and rel(mc, mr) < 1e-10
    # and chunk size 1 is also where the chunk-averaged ablation coincides with E²-TTT
    sl = slice(0, 1)
    a = e2ttt_chunk_update(fw, W, m, k[:, :, sl], v[:, :, sl], lr[..., sl], lg[..., sl], lb[..., sl], lw, lb_)
    b = chunk_average_update(
        fw, W, m, k[:, :, sl], v[:, :, sl], lr[..., sl], lg[..., sl], lb[..., sl], lw, lb_
    )
    assert rel(a[0], b[0]) < 1e-12 and rel(a[1], b[1]) < 1e-12


def test_beta_to_zero_gives_the_no_momentum_weights():
    fw, W, m, k, v, lr, lg, lb, lw, lb_ = problem(L=16, seed=7)
    zero = torch.full_like(lb, float("-inf"))  # β = 0 exactly
    tw = token_weights(lg, zero)
    suffix_gamma = torch.exp(lg.sum(-1, keepdim=True) - torch.cumsum(lg, -1))  # Sγ_i
    close(tw.w_W, suffix_gamma)
    assert float(tw.carry_m.abs().max()) < 1e-20
    # the chunk-end W is decayed GD without momentum: ∏γ W_s − Σ Sγ_i lr_i g_i
    W1, _ = e2ttt_chunk_update(fw, W, m, k, v, lr, lg, zero, lw, lb_)
    grads = token_gradients(fw, W, k, v, lw, lb_)
    expect = [
        torch.exp(lg.sum(-1))[..., None, None] * W[j]
        - sum((suffix_gamma[..., t] * lr[..., t])[..., None, None] * grads[t][j] for t in range(16))
        for j in range(len(W))
    ]
    assert rel(W1, expect) < 1e-10
    assert rel(W1, chunk_loop(fw, W, m, k, v, lr, lg, zero, lw, lb_)[0]) < 1e-10
    # a small β converges to it
    Wsmall, _ = e2ttt_chunk_update(fw, W, m, k, v, lr, lg, torch.full_like(lb, -30.0), lw, lb_)
    assert rel(Wsmall, W1) < 1e-10
    # and with γ = 1 as well, it is plain large-chunk GD (the LaCT-style baseline)
    one = torch.zeros_like(lg)
    a = e2ttt_chunk_update(fw, W, tuple(torch.zeros_like(x) for x in m), k, v, lr, one, zero, lw, lb_)[0]
    b = no_momentum_update(fw, W, m, k, v, lr, one, zero, lw, lb_)[0]
    assert rel(a, b) < 1e-12


def test_state_carried_across_chunks_equals_the_loop():
    fw, W, m, k, v, lr, lg, lb, lw, lb_ = problem(L=37, seed=11)
    q = torch.randn_like(k)
    out_r, W_r, m_r = sequence_loop(fw, W, m, q, k, v, lr, lg, lb, lw, lb_, chunk=8)
    out_f, W_f, m_f, buf = chunked_memory(fw, W, m, q, k, v, lr, lg, lb, lw, lb_, chunk=8)
    assert rel([out_f], [out_r]) < 1e-10 and rel(W_f, W_r) < 1e-10 and rel(m_f, m_r) < 1e-10
    assert buf["k"].shape[2] == 37 % 8  # the unfinished chunk is buffered, not applied
    # buffered: feeding the sequence in odd pieces gives the same outputs and states
    outs, Wb, mb, bb, s = [], W, m, None, 0
    for n in (3, 1, 9, 8, 2, 14):
        sl = slice(s, s + n)
        o, Wb, mb, bb = chunked_memory(
            fw,
            Wb,
            mb,
            q[:, :, sl],
            k[:, :, sl],
            v[:, :, sl],
            lr[..., sl],
            lg[..., sl],
            lb[..., sl],
            lw,
            lb_,
            chunk=8,
            buf=bb,
        )
        outs.append(o)
        s += n
    assert s == 37
    assert rel([torch.cat(outs, 2)], [out_r]) < 1e-10 and rel(Wb, W_r) < 1e-10 and rel(mb, m_r) < 1e-10


def test_queries_read_the_chunk_start_weights():
    fw, W, m, k, v, lr, lg, lb, lw, lb_ = problem(L=16, seed=2)
    q = torch.randn_like(k)
    out, *_ = chunked_memory(fw, W, m, q, k, v, lr, lg, lb, lw, lb_, chunk=8)
    assert torch.equal(out[:, :, :8], fw.apply(W, q[:, :, :8], lw, lb_))
    W8, _ = e2ttt_chunk_update(
        fw, W, m, k[:, :, :8], v[:, :, :8], lr[..., :8], lg[..., :8], lb[..., :8], lw, lb_
    )
    close(out[:, :, 8:], fw.apply(W8, q[:, :, 8:], lw, lb_))


def test_drop_negligible_and_the_loop_leaves_inputs_alone():
    from e2ttt.chunk import drop_negligible

    c = torch.tensor([[[1.0, 1e-3, 1e-17, 0.0, -1e-20, 2e-16]]], dtype=DT)
    out = drop_negligible(c)
    eps = torch.finfo(DT).eps
    assert out.tolist() == [[[1.0, 1e-3, 0.0, 0.0, 0.0, 2e-16 if 2e-16 >= eps else 0.0]]]
    c32 = torch.tensor([[[1e-30, 1e-38, 1e-45]]], dtype=torch.float32)  # scale-relative, not absolute
    assert drop_negligible(c32)[0, 0, 0] == c32[0, 0, 0] and drop_negligible(c32)[0, 0, 2] == 0
    # float32 closed form with near-zero momentum gates (subnormal-range weights) still matches float64 to
    # float32's log-space rounding (observed 5e-6 on W, 6e-5 on m; the same without dropping)
    args = problem(L=64, seed=9, beta=1e-6)
    f32 = [a if not torch.is_tensor(a) else a.float() for a in args[1:]]
    f32 = [tuple(x.float() for x in a) if isinstance(a, tuple) else a for a in f32]
    W32, m32 = e2ttt_chunk_update(args[0], *f32)
    W64, m64 = chunk_loop(*args)
    assert rel([w.double() for w in W32], W64) < 1e-4 and rel([x.double() for x in m32], m64) < 5e-4
    before = [t.clone() for t in (*args[1], *args[2])]
    per_token_chunk_update(*args)
    assert all(torch.equal(a, b) for a, b in zip(before, (*args[1], *args[2])))


def test_closed_form_exact_at_chunk_512_with_gates_near_one():
    """With uniform random gates most of a 512-token chunk underflows out of the sum (only the last ~50
    tokens keep a weight); with β ∈ (0.9, 1), γ ∈ (0.99, 1) every token enters the chunk-end W and m."""
    fw, W, m, k, v, lr, lg, lb, lw, lb_ = problem("mlp", B=1, H=2, d=3, dh=4, L=512, seed=13)
    g = torch.Generator().manual_seed(13)
    lg = torch.log(0.99 + 0.01 * torch.rand(lg.shape, generator=g, dtype=DT))
    lb = torch.log(0.9 + 0.1 * torch.rand(lb.shape, generator=g, dtype=DT))
    tw = token_weights(lg, lb)
    assert bool((tw.w_W > 1e-3).all() and (tw.w_m > 1e-30).all())  # all 512 tokens count
    args = (fw, W, m, k, v, lr, lg, lb, lw, lb_)
    W1, m1 = e2ttt_chunk_update(*args)
    W2, m2 = chunk_loop(*args)
    assert rel(W1, W2) < 1e-10 and rel(m1, m2) < 1e-10


def test_baselines_match_their_definitions():
    """chunk-averaged: m_end = mean(β) m_s − Σ lr_i g_i, W_end = mean(γ) W_s + m_end; no momentum:
    W_end = W_s − Σ lr_i g_i with m untouched (gradients by autograd, chunk of 16, random gates)."""
    fw, W, m, k, v, lr, lg, lb, lw, lb_ = problem(L=16, seed=21)
    grads = token_gradients(fw, W, k, v, lw, lb_)
    step = [sum(lr[..., t, None, None] * grads[t][j] for t in range(16)) for j in range(len(W))]
    mb, mg = lb.exp().mean(-1)[..., None, None], lg.exp().mean(-1)[..., None, None]
    m_want = [mb * m[j] - step[j] for j in range(len(W))]
    W_want = [mg * W[j] + m_want[j] for j in range(len(W))]
    W_avg, m_avg = chunk_average_update(fw, W, m, k, v, lr, lg, lb, lw, lb_)
    assert rel(W_avg, W_want) < 1e-12 and rel(m_avg, m_want) < 1e-12
    W_nm, m_nm = no_momentum_update(fw, W, m, k, v, lr, lg, lb, lw, lb_)
    assert rel(W_nm, [W[j] - step[j] for j in range(len(W))]) < 1e-12
    assert all(a is b for a, b in zip(m_nm, m))
    # and the ablation really differs from E²-TTT once the chunk has more than one token
    assert rel(e2ttt_chunk_update(fw, W, m, k, v, lr, lg, lb, lw, lb_)[0], W_want) > 1e-3
