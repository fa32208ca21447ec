"""Bad input raises InputError naming the argument; nothing propagates NaN silently."""

import numpy as np
import pytest
import torch
from asvq import AdaptiveScaleVQ, make_quantizer, nearest_code, train_autoencoder
from asvq.models import mlp_autoencoder

from papershelf.errors import InputError


@pytest.mark.parametrize("name", ["asvq", "vq", "vq-ema", "simvq", "fsq"])
def test_dimension_mismatch_and_nan(name):
    q = make_quantizer(name, 8, 256)
    with pytest.raises(InputError, match=r"dim=8.*\(\.\.\., 8\)"):
        q(torch.randn(4, 7))
    z = torch.randn(4, 8)
    z[2, 3] = float("nan")
    with pytest.raises(InputError, match="NaN"):
        q(z)
    with pytest.raises(InputError, match="floating"):
        q(torch.ones(4, 8, dtype=torch.long))


@pytest.mark.parametrize("size", [1, 0, -3])
def test_codebook_size_below_two(size):
    for name in ("asvq", "vq", "vq-ema", "simvq"):
        with pytest.raises(InputError, match="codebook_size"):
            make_quantizer(name, 8, size)


def test_unknown_quantizer_lists_the_known_ones():
    with pytest.raises(InputError, match="known quantizers: asvq, vq, vq-ema, simvq, fsq"):
        make_quantizer("lfq", 8, 256)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"scale": "full"}, "scale must be one of"),
        ({"init": "zeros"}, "init must be one of"),
        ({"beta": -1.0}, "beta"),
        ({"ema_decay": 1.0}, "ema_decay"),
        ({"scale_init": "big"}, "scale_init"),
    ],
)
def test_bad_asvq_options(kwargs, match):
    with pytest.raises(InputError, match=match):
        AdaptiveScaleVQ(8, 64, **kwargs)


def test_misc_bad_inputs():
    with pytest.raises(InputError, match="FSQ levels"):
        make_quantizer("fsq", 8, 1000)
    with pytest.raises(InputError, match="bad options"):
        make_quantizer("vq", 8, 64, no_such_option=1)
    with pytest.raises(InputError, match="dimension"):
        nearest_code(torch.randn(3, 4), torch.randn(5, 3))
    with pytest.raises(InputError, match="NaN"):
        nearest_code(torch.tensor([[float("nan"), 0.0]]), torch.randn(5, 2))
    with pytest.raises(InputError, match="floating point"):
        nearest_code(torch.tensor([[0, 0, 0, 1]]), torch.tensor([[0.4] * 4, [0, 0, 0, 0.9]]))
    q = make_quantizer("asvq", 8, 64)
    with pytest.raises(InputError, match="indices must lie"):
        q.decode(torch.tensor([64]))
    with pytest.raises(InputError, match="latent dim"):
        mlp_autoencoder(64, q, dim=16)
    x = np.zeros((10, 4), dtype=np.float32)
    bad = x.copy()
    bad[0, 0] = np.nan
    with pytest.raises(InputError, match="train contains NaN"):
        train_autoencoder(bad, x, steps=2)
    with pytest.raises(InputError, match="features"):
        train_autoencoder(x, x[:, :3], steps=2)


def test_nearest_code_refuses_bad_codes_and_norms():
    import torch
    from asvq.search import nearest_code

    x, codes = torch.zeros(3, 4), torch.ones(5, 4)
    for kwargs, match in (({"codes": torch.full((5, 4), float("nan"))}, "codes contain NaN"),
                          ({"codes_sqnorm": torch.ones(4)}, "codes_sqnorm must be"),
                          ({"codes_sqnorm": torch.full((5,), float("nan"))}, "codes_sqnorm contains"),
                          ({"x": np.zeros((3, 4))}, "torch tensors")):  # fmt: skip
        args = {"x": x, "codes": codes, **kwargs}
        with pytest.raises(InputError, match=match):
            nearest_code(args.pop("x"), args.pop("codes"), **args)


def test_quantizer_options_are_checked_not_coerced():
    import torch
    from asvq.quantizers import FSQ
    from asvq.registry import make_quantizer

    for name, kwargs, match in (("asvq", {"offset": "no"}, "offset"),
                                ("vq", {"rotation_trick": "no"}, "rotation_trick"),
                                ("asvq", {"seed": -1}, "seed"), ("asvq", {"seed": 1.5}, "seed")):  # fmt: skip
        with pytest.raises(InputError, match=match):
            make_quantizer(name, 4, 16, **kwargs)
    with pytest.raises(InputError, match="unknown quantizer"):
        make_quantizer(["asvq"], 4, 16)
    with pytest.raises(InputError, match="levels must be a sequence"):
        FSQ(4, levels=5)
    with pytest.raises(InputError, match="more than 2"):
        FSQ(4, levels=[10**6] * 4)
    fsq = FSQ(4, levels=[3, 3])
    for bad in (torch.tensor([0.5]), [1], torch.tensor([9])):
        with pytest.raises(InputError, match="indices"):
            fsq.decode(bad)


def test_autoencoder_training_inputs_are_checked():
    import torch
    from asvq.models import mlp_autoencoder
    from asvq.registry import make_quantizer

    x = np.zeros((10, 4), dtype=np.float32)
    for kwargs, match in (({"train": x.astype(complex)}, "real numbers"), ({"train": x.astype(str)}, "real"),
                          ({"seed": 1.5}, "seed"), ({"quantizer_options": {"seed": 1}}, "seed")):  # fmt: skip
        args = {"train": x, "test": x, "steps": 2, **kwargs}
        with pytest.raises(InputError, match=match):
            train_autoencoder(args.pop("train"), args.pop("test"), **args)
    q = make_quantizer("vq", 16, 8, seed=0)
    with pytest.raises(InputError, match="hidden"):
        mlp_autoencoder(4, q, hidden=0)
    ae = mlp_autoencoder(4, q)
    for bad in (torch.zeros(3, 9), torch.zeros(3, 4, dtype=torch.long)):
        with pytest.raises(InputError, match="x must"):
            ae(bad)


@pytest.mark.parametrize("name", ["simvq-vqp", "vq-vqp"])
@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        ((8, 1), {}, "codebook_size"),
        ((8, 0), {}, "codebook_size"),
        ((0, 16), {}, "dim"),
        ((8, 16), {"seed": -1}, "seed"),
        ((8, 16), {"seed": 1.5}, "seed"),
        ((8, 16), {"seed": "x"}, "seed"),
    ],
)
def test_vqp_wrappers_check_their_arguments(name, args, kwargs, match):
    # checked before vector-quantize-pytorch is imported, so this runs without the [bench] extra too;
    # that library itself accepts codebook_size=1 and 0, and the wrapper used to pass int(1.5) as seed
    with pytest.raises(InputError, match=match):
        make_quantizer(name, *args, **kwargs)


def test_fsq_codebook_size_below_two():
    for size in (1, 0):
        with pytest.raises(InputError, match="codebook_size"):
            make_quantizer("fsq", 8, size)
