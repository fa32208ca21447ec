"""Hand-written gradients, gradcheck, stabilisers, the layer and the LM: causality and buffered decoding."""

import pytest
import torch
from e2ttt.chunk import clip_by_norm, e2ttt_chunk_update, renorm_rows, row_norms
from e2ttt.fastweights import FastWeight
from e2ttt.layer import RULES, E2TTTLayer, TinyLM
from e2ttt.reference import token_gradients
from e2ttt.testing import DT, problem, rel


@pytest.mark.parametrize("variant", ["mlp", "swiglu", "linear"])
def test_hand_written_gradients_match_autograd(variant):
    fw, W, _m, k, v, lr, _lg, _lb, lw, lb_ = problem(variant, L=5, seed=1)
    factors = fw.token_grads(W, k, v, lw, lb_)
    auto = token_gradients(fw, W, k, v, lw, lb_)
    for t in range(5):
        c = torch.zeros_like(lr)
        c[..., t] = 1.0
        assert rel(fw.weighted_grad(factors, c), auto[t]) < 1e-12


@pytest.mark.parametrize("variant", ["mlp", "swiglu"])
def test_gradcheck_closed_form(variant):
    fw, W, m, k, v, lr, lg, lb, lw, lb_ = problem(variant, B=1, H=1, d=3, dh=4, L=5, seed=4)
    norms = row_norms(W)

    def f(W0, m0, k, v, lr, lg, lb, lw, lbias):
        Wn, mn = e2ttt_chunk_update(
            fw, (W0, *W[1:]), (m0, *m[1:]), k, v, lr, lg, lb, lw, lbias, clip=0.5, norms=norms
        )
        return (*Wn, *mn)

    inputs = [x.clone().requires_grad_(True) for x in (W[0], m[0], k, v, lr, lg, lb, lw, lb_)]
    jacobian_check(f, inputs)


def jacobian_check(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-5):
    """torch.autograd.gradcheck's test written out (its first call imports sympy, ~20 s on a loaded box):
    the full Jacobian by central differences equals the one from backward passes, in float64."""
    outs = torch.cat([o.reshape(-1) for o in f(*inputs)])

    def grads(o):
        return torch.autograd.grad(o, inputs, retain_graph=True, materialize_grads=True)

    analytic = torch.stack([torch.cat([g.reshape(-1) for g in grads(o)]) for o in outs])
    cols = []
    with torch.no_grad():
        for x in inputs:
            flat = x.view(-1)
            for i in range(flat.numel()):
                old = float(flat[i])
                flat[i] = old + eps
                plus = torch.cat([o.reshape(-1) for o in f(*inputs)])
                flat[i] = old - eps
                minus = torch.cat([o.reshape(-1) for o in f(*inputs)])
                flat[i] = old
                cols.append((plus - minus) / (2 * eps))
    numeric = torch.stack(cols, 1)
    assert float(analytic.abs().sum()) > 0
    assert torch.allclose(analytic, numeric, atol=atol, rtol=rtol), float((analytic - numeric).abs().max())


def test_clipping_and_renormalisation_match_their_definitions():
    g = torch.Generator().manual_seed(0)
    u = torch.randn(2, 3, 4, 5, generator=g, dtype=DT)
    u[0, 0] *= 1e-3  # one head under the bound: untouched
    c = clip_by_norm(u, 1.0)
    norms = u.flatten(-2).norm(dim=-1)
    for b in range(2):
        for h in range(3):
            n = float(norms[b, h])
            expect = u[b, h] if n <= 1.0 else u[b, h] / n
            assert torch.allclose(c[b, h], expect, rtol=1e-12, atol=0)
    assert torch.equal(clip_by_norm(u, None), u)
    target = torch.rand(2, 3, 4, generator=g, dtype=DT) + 0.5
    r = renorm_rows(u, target)
    assert torch.allclose(r.norm(dim=-1), target, rtol=1e-10)
    cos = (r * u).sum(-1) / (r.norm(dim=-1) * u.norm(dim=-1))
    assert torch.allclose(cos, torch.ones_like(cos), rtol=1e-12)
    # inside the update: the applied ΔW is exactly clip(Σ α_i lr_i g_i), the rows renormalised after
    fw, W, m, k, v, lr, lg, lb, lw, lb_ = problem(L=16, seed=9)
    W_free, m_free = e2ttt_chunk_update(fw, W, m, k, v, 100 * lr, lg, lb, lw, lb_)
    W_clip, m_clip = e2ttt_chunk_update(fw, W, m, k, v, 100 * lr, lg, lb, lw, lb_, clip=0.3)
    base_W, _ = e2ttt_chunk_update(fw, W, m, k, v, 0 * lr, lg, lb, lw, lb_)
    base_m = e2ttt_chunk_update(fw, W, m, k, v, 0 * lr, lg, lb, lw, lb_)[1]
    for j in range(2):
        d_free, d_clip = W_free[j] - base_W[j], W_clip[j] - base_W[j]
        assert rel([d_clip], [clip_by_norm(d_free, 0.3)]) < 1e-10
        assert float(d_clip.flatten(-2).norm(dim=-1).max()) <= 0.3 + 1e-12
        assert rel([m_clip[j] - base_m[j]], [clip_by_norm(m_free[j] - base_m[j], 0.3)]) < 1e-10
    norms = row_norms(W)
    W_rn, _ = e2ttt_chunk_update(fw, W, m, k, v, lr, lg, lb, lw, lb_, clip=0.3, norms=norms)
    W_c, _ = e2ttt_chunk_update(fw, W, m, k, v, lr, lg, lb, lw, lb_, clip=0.3)
    assert rel(W_rn, [renorm_rows(w, n) for w, n in zip(W_c, norms)]) < 1e-12
    assert rel(row_norms(W_rn), norms) < 1e-10


def small_lm(rule, **kw):
    cfg = dict(vocab=40, d_model=16, n_layers=2, n_heads=2, chunk=4, window=3, rule=rule, base_lr=0.5)
    cfg.update(kw)
    return TinyLM(**cfg).double()


@torch.no_grad()
@pytest.mark.parametrize("rule", RULES)
def test_buffered_decoding_equals_the_full_forward(rule):
    model = small_lm(rule, variant="swiglu" if rule == "chunkavg" else "mlp")
    ids = torch.randint(0, 40, (2, 23), generator=torch.Generator().manual_seed(1))  # 23: not a multiple of 4
    full, _ = model(ids)
    logits, states = model(ids[:, :6], return_state=True)
    outs, t = [logits], 6
    for n in (1, 1, 3, 5, 1, 4, 1, 1):
        step, states = model(ids[:, t : t + n], states, return_state=True)
        outs.append(step)
        t += n
    assert t == 23
    assert float((torch.cat(outs, 1) - full).abs().max()) < 1e-10
    if rule != "swa":
        assert states[0].buffered == 23 % 4 and states[0].pos == 23


@torch.no_grad()
@pytest.mark.parametrize("rule", ["e2ttt", "chunkavg", "ttt-linear"])
def test_causality(rule):
    model = small_lm(rule)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 40, (1, 18), generator=g)
    base, _ = model(ids)
    for t in (0, 3, 4, 9, 16):
        other = ids.clone()
        other[0, t + 1 :] = torch.randint(0, 40, (17 - t,), generator=g)
        out, _ = model(other)
        assert torch.equal(out[0, : t + 1], base[0, : t + 1]), t
        assert not torch.allclose(out[0, t + 1 :], base[0, t + 1 :])


@torch.no_grad()
def test_memory_reaches_beyond_the_window():
    """A token far outside the SWA window still changes later outputs via the fast weights (not for SWA)."""
    ids = torch.randint(0, 40, (1, 30), generator=torch.Generator().manual_seed(3))
    other = ids.clone()
    other[0, 1] = (ids[0, 1] + 1) % 40
    for rule, expect_change in (("e2ttt", True), ("swa", False)):
        model = small_lm(rule, n_layers=1)
        a, _ = model(ids)
        b, _ = model(other)
        changed = not torch.allclose(a[0, 20:], b[0, 20:], rtol=0, atol=1e-12)
        assert changed == expect_change, rule


def test_training_step_reaches_every_gate():
    model = TinyLM(vocab=40, d_model=16, n_layers=1, n_heads=2, chunk=4, window=3)
    ids = torch.randint(0, 40, (2, 12))
    logits, _ = model(ids)
    torch.nn.functional.cross_entropy(logits.reshape(-1, 40), ids.reshape(-1)).backward()
    mix = model.blocks[0].mix
    for p in (mix.g_lr.weight, mix.g_decay.weight, mix.g_mom.weight, mix.W_init[0], mix.ln_w):
        assert p.grad is not None and float(p.grad.abs().sum()) > 0


def test_bad_input():
    from papershelf.errors import InputError

    fw, W, m, k, v, lr, lg, lb, lw, lb_ = problem(L=4)
    with pytest.raises(InputError, match="log_beta"):
        e2ttt_chunk_update(fw, W, m, k, v, lr, lg, -lb + 0.1, lw, lb_, validate=True)
    with pytest.raises(InputError, match="log_gamma"):
        e2ttt_chunk_update(fw, W, m, k, v, lr, lg.abs() + 0.1, lb, lw, lb_, validate=True)
    with pytest.raises(InputError, match="lr"):
        e2ttt_chunk_update(fw, W, m, k, v, -lr - 0.1, lg, lb, lw, lb_, validate=True)
    with pytest.raises(InputError, match="lr must have shape"):
        e2ttt_chunk_update(fw, W, m, k, v, lr[..., :3], lg, lb, lw, lb_, validate=True)
    with pytest.raises(InputError, match="head dim"):
        e2ttt_chunk_update(FastWeight("mlp", 5, 6), W, m, k, v, lr, lg, lb, lw, lb_, validate=True)
    bad = k.clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(InputError, match="k contains"):
        e2ttt_chunk_update(fw, W, m, bad, v, lr, lg, lb, lw, lb_, validate=True)
    with pytest.raises(InputError, match="W tensor"):
        e2ttt_chunk_update(fw, (W[0][:, :1], W[1]), m, k, v, lr, lg, lb, lw, lb_, validate=True)
    with pytest.raises(InputError, match="not divisible"):
        E2TTTLayer(10, 3)
    with pytest.raises(InputError, match="rule"):
        E2TTTLayer(8, 2, rule="mamba")
    layer = E2TTTLayer(8, 2, chunk=4, window=4)
    with pytest.raises(InputError, match="x must be"):
        layer(torch.randn(1, 5, 9))
    with pytest.raises(InputError, match="non-finite"):
        layer(torch.full((1, 5, 8), float("inf")))
    model = TinyLM(vocab=40, d_model=16, n_layers=1, n_heads=2, chunk=4, window=4)
    with pytest.raises(InputError, match="ids must be in"):
        model(torch.tensor([[0, 40]]))
    with pytest.raises(InputError, match="integer"):
        model(torch.zeros(1, 3))


def test_public_updates_validate_by_default():
    """Every public chunk rule checks its inputs unless told not to; a non-positive clip is refused."""
    from e2ttt.baselines import chunk_average_update, no_momentum_update

    from papershelf.errors import InputError

    fw, W, m, k, v, lr, lg, lb, lw, lb_ = problem(L=4)
    for update in (e2ttt_chunk_update, chunk_average_update, no_momentum_update):
        with pytest.raises(InputError, match="lr"):
            update(fw, W, m, k, v, torch.full_like(lr, float("nan")), lg, lb, lw, lb_)
        with pytest.raises(InputError, match="ln_w"):
            update(fw, W, m, k, v, lr, lg, lb, lw[:1], lb_)
        for clip in (0.0, -1.0, float("nan")):
            with pytest.raises(InputError, match="clip"):
                update(fw, W, m, k, v, lr, lg, lb, lw, lb_, clip=clip)
    with pytest.raises(InputError, match="clip"):
        clip_by_norm(torch.ones(1, 1, 2, 2), -1.0)


def test_layer_and_model_refuse_malformed_calls():
    from papershelf.errors import InputError

    layer = E2TTTLayer(8, 2, chunk=4, window=4)
    for x, match in ((torch.ones(1, 3, 8, dtype=torch.long), "dtype"), (torch.zeros(1, 0, 8), "tokens >= 1")):
        with pytest.raises(InputError, match=match):
            layer(x)
    with pytest.raises(InputError, match="LayerState"):
        layer(torch.zeros(1, 3, 8), state="abc")
    with pytest.raises(InputError, match="d_model"):
        TinyLM(d_model=-1)
    model = TinyLM(vocab=40, d_model=16, n_layers=1, n_heads=2, chunk=4, window=4)
    with pytest.raises(InputError, match="no tokens"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(InputError, match="LayerState"):
        model(torch.tensor([[1, 2]]), states=[1])


@pytest.mark.parametrize("variant", ["mlp", "swiglu", "linear"])
def test_blocked_and_multi_weighted_gradients_match_the_plain_ones(variant):
    """chunk_grads (heads in blocks, several weightings in one contraction) = weighted_grad per weighting
    on the unblocked factors, and the blocked factors = the unblocked ones."""
    fw, W, _m, k, v, lr, lg, _lb, lw, lb_ = problem(variant, H=5, L=7, seed=2)
    factors = fw.token_grads(W, k, v, lw, lb_)
    cs = (lr, lg.exp(), lr * lg)
    want = [fw.weighted_grad(factors, c) for c in cs]
    for block_elems in (1, 2 * 7 * fw.dh, 10**9):  # one head per block, blocks of 2 heads (5 = 2+2+1), none
        got = fw.chunk_grads(W, k, v, lw, lb_, cs, block_elems=block_elems)
        assert len(got) == len(cs)
        for g, w in zip(got, want):
            assert rel(g, w) < 1e-13
        blocked = fw.token_grads_blocked(W, k, v, lw, lb_, block_elems=block_elems)
        assert blocked[0] == factors[0]
        assert all(rel((b,), (f,)) < 1e-15 for b, f in zip(blocked[1:], factors[1:]))


def test_chunk_update_refuses_malformed_arguments():
    """Each a clear InputError, not an IndexError/TypeError/RuntimeError from deep inside torch."""
    from papershelf.errors import InputError

    fw, W, m, k, v, lr, lg, lb, lw, lb_ = problem(L=4)
    e = e2ttt_chunk_update
    empty = (k[:, :, :0], v[:, :, :0], lr[..., :0], lg[..., :0], lb[..., :0])
    cases = [
        ("no tokens", lambda: e(fw, W, m, *empty, lw, lb_)),
        ("ln_w must be a torch.Tensor", lambda: e(fw, W, m, k, v, lr, lg, lb, None, lb_)),
        ("k is torch.float32", lambda: e(fw, W, m, k.float(), v, lr, lg, lb, lw, lb_)),
        ("W is torch.float32", lambda: e(fw, tuple(w.float() for w in W), m, k, v, lr, lg, lb, lw, lb_)),
        ("lr must be a torch.Tensor", lambda: e(fw, W, m, k, v, [0.1] * 4, lg, lb, lw, lb_)),
        ("lr must be a floating-point", lambda: e(fw, W, m, k, v, lr.long(), lg, lb, lw, lb_)),
        ("fw must be", lambda: e(None, W, m, k, v, lr, lg, lb, lw, lb_)),
        ("m must be a tuple", lambda: e(fw, W, m[0], k, v, lr, lg, lb, lw, lb_)),
    ]  # fmt: skip
    for match, call in cases:
        with pytest.raises(InputError, match=match):
            call()


def test_layer_refuses_a_state_from_another_layer():
    """A state of another head count, head dim, dtype, rule or variant, or with an over-full buffer."""
    from e2ttt.layer import LayerState

    from papershelf.errors import InputError

    x = torch.randn(1, 5, 8)
    layer = E2TTTLayer(8, 2, chunk=4, window=4)
    others = [
        ("heads", E2TTTLayer(8, 4, chunk=4, window=4)),
        ("heads", E2TTTLayer(8, 2, head_dim=6, chunk=4, window=4)),
        ("no fast weights", E2TTTLayer(8, 2, chunk=4, window=4, rule="swa")),
        ("no fast weights", E2TTTLayer(8, 2, chunk=4, window=4, variant="swiglu")),
        ("fast weight", E2TTTLayer(8, 2, chunk=4, window=4, hidden_mult=3)),
    ]
    for match, other in others:
        _, st = other(x, return_state=True)
        with pytest.raises(InputError, match=match):
            layer(x, st)
    _, st = layer(x, return_state=True)
    with pytest.raises(InputError, match="dtype"):
        layer.double()(x.double(), st)
    layer.float()
    _, st = layer(x[:, :3], return_state=True)  # 3 tokens buffered
    with pytest.raises(InputError, match="buffers 3"):
        E2TTTLayer(8, 2, chunk=2, window=4)(x, st)
    full = LayerState(st.W, st.m, st.norms, {key: torch.cat([t, t], 2) for key, t in st.buf.items()},
                      st.k_cache, st.v_cache, st.pos)  # fmt: skip
    with pytest.raises(InputError, match="buffers 6"):
        layer(x, full)
    layer(x, st)  # its own state still works


def test_full_decay_gate_has_finite_gradients():
    """base_decay = 1 is allowed (γ ∈ (0, 1)); a saturated decay gate must not give NaN gradients
    (log1p(−σ(u)) is −inf with NaN gradient once σ(u) rounds to 1)."""
    layer = E2TTTLayer(8, 2, chunk=4, window=4, base_decay=1.0)
    with torch.no_grad():
        layer.g_decay.bias.fill_(30.0)  # σ(30) == 1 in float32
    x = torch.randn(1, 12, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, lg, _ = layer.gates(x)
    assert bool(torch.isfinite(lg).all()) and float(lg.max()) < -25
    y, _ = layer(x)
    y.square().mean().backward()
    for name, p in layer.named_parameters():
        assert p.grad is None or bool(torch.isfinite(p.grad).all()), name
    # and for base_decay < 1 the gates are the same as before: log γ = log1p(−b σ(u))
    half = E2TTTLayer(8, 2, chunk=4, window=4, base_decay=0.5)
    with torch.no_grad():
        want = torch.log1p(-0.5 * torch.sigmoid(half.g_decay(x))).transpose(1, 2)
        assert torch.equal(half.gates(x)[1], want)
