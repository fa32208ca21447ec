"""Every quantizer against the equations of reference.py: codes, assignments, STE, losses, gradients."""

import numpy as np
import pytest
import torch
from asvq import FSQ, AdaptiveScaleVQ, EMAVectorQuantizer, SimVQ, VectorQuantizer, make_quantizer
from asvq import reference as ref

from papershelf.testing import assert_close

D, K = 6, 40


def _z(n=32, seed=0, dtype=torch.float64):
    return torch.randn(n, 3, D, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _asvq(**kw):
    q = AdaptiveScaleVQ(D, K, seed=1, **kw).double()
    with torch.no_grad():  # move away from the all-ones start so the test can tell s from 1
        if isinstance(q.scale, torch.nn.Parameter) if hasattr(q, "scale") else False:
            q.scale.copy_(torch.rand(q.scale.shape, generator=torch.Generator().manual_seed(3)) + 0.5)
        if q.shift is not None:
            q.shift.copy_(torch.randn(D, generator=torch.Generator().manual_seed(4)) * 0.1)
    return q


@pytest.mark.parametrize("mode", ["per_dim", "per_code", "scalar"])
@pytest.mark.parametrize("offset", [False, True])
def test_asvq_codes_equal_their_definition(mode, offset):
    q = _asvq(scale=mode, offset=offset)
    want = ref.asvq_codes(
        q.basis.numpy(), q.scale.detach().numpy(), None if q.shift is None else q.shift.detach().numpy(), mode
    )
    assert_close(q.codebook, want)


def test_ema_stats_codes_follow_the_batch_statistics():
    q = AdaptiveScaleVQ(D, K, scale="ema_stats", ema_decay=0.5, seed=0).double()
    assert q.num_quantizer_params() == 0
    z1, z2 = _z(seed=1) * 3 + 1, _z(seed=2) * 2 - 1
    q(z1)
    q(z2)
    f1, f2 = z1.reshape(-1, D), z2.reshape(-1, D)
    mean = 0.5 * f1.mean(0) + 0.5 * f2.mean(0)
    std = 0.5 * f1.std(0) + 0.5 * f2.std(0)
    assert_close(q.codebook, ref.ema_stats_codes(q.basis.numpy(), mean.numpy(), std.numpy()))


def test_simvq_codes_equal_W_u_plus_b_and_output_uses_them():
    q = SimVQ(D, K, seed=0).double()
    W, b = q.proj.weight.detach().numpy(), q.proj.bias.detach().numpy()
    codes = ref.simvq_codes(q.basis.numpy(), W, b)
    assert_close(q.codebook, codes)
    z = _z()
    out = q(z)
    # the output is the transformed code, not the frozen basis vector (a known porting bug)
    assert_close(out.quantized, torch.from_numpy(codes)[out.indices])
    assert not torch.allclose(out.quantized, q.basis[out.indices])


QUANTS = {
    "asvq": lambda: _asvq(),
    "asvq-offset": lambda: _asvq(offset=True),
    "vq": lambda: VectorQuantizer(D, K, seed=0).double(),
    "vq-ema": lambda: EMAVectorQuantizer(D, K, seed=0).double().eval(),
    "simvq": lambda: SimVQ(D, K, seed=0).double(),
}


@pytest.mark.parametrize("name", list(QUANTS))
def test_assignment_output_and_loss_match_reference(name):
    q = QUANTS[name]()
    z = _z()
    codes = q.codebook.numpy()
    out = q(z)
    want = ref.brute_force_nearest(z.reshape(-1, D).numpy(), codes)
    np.testing.assert_array_equal(out.indices.reshape(-1).numpy(), want)
    assert out.indices.shape == (32, 3) and out.quantized.shape == z.shape
    assert_close(out.quantized.reshape(-1, D), codes[want])
    c_sel = codes[want]
    expected = ref.vq_loss(z.reshape(-1, D).numpy(), c_sel, q.beta)
    if name == "vq-ema":  # commitment only
        expected = expected / (1 + q.beta) * q.beta
    assert float(out.loss.detach()) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name", list(QUANTS))
def test_straight_through_gradient_is_the_identity(name):
    q = QUANTS[name]()
    z = _z().requires_grad_(True)
    g = torch.randn(z.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    (q(z).quantized * g).sum().backward()
    assert torch.equal(z.grad, g)  # dL/dz_e = dL/dẑ exactly


def test_only_the_scale_receives_codebook_gradients():
    q = AdaptiveScaleVQ(D, K, seed=0).double()
    assert [n for n, p in q.named_parameters()] == ["scale"]
    assert not q.basis.requires_grad
    basis_before = q.basis.clone()
    z = _z()
    out = q(z)
    (out.quantized.sum() + out.loss).backward()
    assert q.basis.grad is None
    assert q.scale.grad is not None and bool((q.scale.grad != 0).all())
    # the scale gradient is exactly that of the codebook term ||sg[z] - s ⊙ u_k||² (the commitment
    # and the STE path carry no gradient to s)
    flat = z.reshape(-1, D)
    u = q.basis[out.indices.reshape(-1)]
    manual = (2 * (u * q.scale.detach() - flat) * u).sum(0) / flat.numel()
    assert_close(q.scale.grad, manual)
    with torch.no_grad():
        q.scale -= 0.1 * q.scale.grad
    assert torch.equal(q.basis, basis_before)


def test_every_asvq_code_moves_but_plain_vq_moves_only_selected_codes():
    z = _z(n=4)
    for q, expect_all in (
        (AdaptiveScaleVQ(D, K, seed=0).double(), True),
        (VectorQuantizer(D, K, seed=0).double(), False),
    ):
        before = q.codebook.clone()
        out = q(z)
        out.loss.backward()
        with torch.no_grad():
            for p in q.parameters():
                p -= 0.5 * p.grad
        moved = (q.codebook - before).abs().sum(1) > 0
        used = torch.zeros(K, dtype=torch.bool)
        used[out.indices.unique()] = True
        if expect_all:
            assert moved.all()
        else:
            assert torch.equal(moved, used) and used.sum() < K


def test_rotation_trick_value_and_gradient():
    q = AdaptiveScaleVQ(D, K, seed=0, rotation_trick=True).double()
    z = _z(n=5).requires_grad_(True)
    g = torch.randn(z.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    out = q(z)
    assert_close(out.quantized, q.codebook[out.indices])
    (out.quantized * g).sum().backward()
    flat, gf = z.detach().reshape(-1, D).numpy(), g.reshape(-1, D).numpy()
    codes = q.codebook.numpy()[out.indices.reshape(-1).numpy()]
    want = np.stack([ref.rotation_matrix(flat[i], codes[i]).T @ gf[i] for i in range(len(flat))])
    assert_close(z.grad.reshape(-1, D), want)
    assert not torch.allclose(z.grad, g)  # not the straight-through gradient


def test_ema_codebook_update_matches_reference():
    q = EMAVectorQuantizer(D, K, decay=0.9, eps=1e-5, seed=0).double()
    N0, M0 = q.cluster_size.clone().numpy(), q.embed_sum.clone().numpy()
    z = _z()
    out = q(z)
    N, M, C = ref.ema_update(N0, M0, z.reshape(-1, D).numpy(), out.indices.reshape(-1).numpy(), 0.9, 1e-5)
    assert_close(q.cluster_size, N)
    assert_close(q.embed_sum, M)
    assert_close(q.codebook, C)
    assert q.num_quantizer_params() == 0


def test_fsq_matches_reference_and_indices_round_trip():
    q = FSQ(D, levels=(7, 5, 4), seed=0).double()
    assert q.codebook_size == 140
    z = _z()
    h = q.project_in(z)
    assert_close(q.quantize_channels(h), ref.fsq_quantize(h.detach().numpy(), (7, 5, 4)))
    out = q(z)
    assert int(out.indices.min()) >= 0 and int(out.indices.max()) < 140
    assert_close(q.decode(out.indices), out.quantized)
    all_idx = torch.arange(140)
    back = q.channels_to_indices(q.indices_to_channels(all_idx))
    assert torch.equal(back, all_idx)
    assert q.codebook.shape == (140, D) and float(out.loss.detach()) == 0.0
    assert make_quantizer("fsq", 16, 4096).levels == (7, 5, 5, 5, 5)


def test_kmeans_init_sets_the_basis_from_the_first_batch_then_freezes_it():
    q = AdaptiveScaleVQ(D, 8, init="kmeans", seed=0).double()
    z = torch.cat([torch.full((20, D), float(v)) for v in range(8)]).double()
    gaussian_error = float(((q.codebook[q.encode(z)] - z) ** 2).mean())
    q(z)
    # every centre is a mean of batch points (values inside [0, 7], constant across dimensions) and the
    # k-means codebook quantizes the batch far better than the random basis did
    assert float(q.basis.min()) >= 0 and float(q.basis.max()) <= 7
    assert torch.allclose(q.basis, q.basis[:, :1].expand(-1, D))
    kmeans_error = float(((q.codebook[q.encode(z)] - z) ** 2).mean())
    assert kmeans_error < 0.1 * gaussian_error
    before = q.basis.clone()
    q(z * 5)
    assert torch.equal(q.basis, before)


def test_data_scale_init_matches_the_latent_spread():
    q = AdaptiveScaleVQ(D, 4096, scale_init="data", seed=0)
    z = torch.randn(2000, D, generator=torch.Generator().manual_seed(0)) * torch.arange(1, D + 1)
    q(z)
    spread = q.codebook.std(0)
    assert_close(spread, z.std(0), rtol=0.1, atol=0)


def test_encode_decode_agree_with_forward():
    for name in ("asvq", "vq", "simvq"):
        q = make_quantizer(name, D, K, seed=0)
        z = _z(dtype=torch.float32)
        out = q(z)
        assert torch.equal(q.encode(z), out.indices)
        assert_close(q.decode(out.indices), out.quantized, atol=1e-6, rtol=1e-6)


def test_parameter_counts():
    assert make_quantizer("asvq", 64, 4096).num_quantizer_params() == 64
    assert make_quantizer("asvq", 64, 4096, offset=True).num_quantizer_params() == 128
    assert make_quantizer("asvq", 64, 4096, scale="per_code").num_quantizer_params() == 4096
    assert make_quantizer("asvq", 64, 4096, scale="scalar").num_quantizer_params() == 1
    assert make_quantizer("simvq", 64, 4096).num_quantizer_params() == 64 * 64 + 64
    assert make_quantizer("vq", 64, 4096).num_quantizer_params() == 64 * 4096
