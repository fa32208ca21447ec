"""vector-quantize-pytorch's quantizers run behind the package's interface (skipped without [bench])."""

import pytest
import torch

vqp = pytest.importorskip("vector_quantize_pytorch")

from asvq import make_quantizer  # noqa: E402
from asvq.search import nearest_code  # noqa: E402


def test_vqp_simvq_and_vectorquantize_share_the_interface():
    z = torch.randn(4, 6, 8)
    for name in ("simvq-vqp", "vq-vqp"):
        q = make_quantizer(name, 8, 64, seed=0)
        quantized, indices, loss = q(z)
        assert quantized.shape == z.shape and indices.shape == (4, 6) and loss.ndim == 0
    assert make_quantizer("simvq-vqp", 8, 64).num_quantizer_params() == 64  # Linear(8, 8) without bias


def test_vqp_vectorquantize_eval_picks_the_same_codes_as_nearest_code():
    torch.manual_seed(0)
    vq = vqp.VectorQuantize(dim=8, codebook_size=64).eval()
    codes = torch.randn(64, 8)
    with torch.no_grad():
        vq._codebook.embed.copy_(codes[None])
        vq._codebook.initted.fill_(True)
        x = torch.randn(1, 500, 8)
        assert torch.equal(vq(x)[1][0], nearest_code(x[0], codes))
