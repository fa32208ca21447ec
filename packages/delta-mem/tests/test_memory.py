import copy

import pytest
import torch
from delta_mem.io import backbone_fingerprint, load_adapter, save_adapter
from delta_mem.memory import DeltaMemConfig
from delta_mem.wrap import (
    attach_delta_mem,
    count_memory_parameters,
    detach_delta_mem,
    get_state,
    memory_layers,
    memory_parameters,
    reset_state,
)

from papershelf.errors import InputError


def _prefill_then_decode(model, ids, prefill: int):
    """Logits of a fresh conversation: ``ids[:, :prefill]`` in one call, then one token per call."""
    reset_state(model)
    out = model(input_ids=ids[:, :prefill], use_cache=True)
    steps = [out.logits]
    for t in range(prefill, ids.shape[1]):
        cache = getattr(out, "cache", None)
        kw = {"cache": cache} if cache is not None else {"past_key_values": out.past_key_values}
        out = model(input_ids=ids[:, t : t + 1], use_cache=True, **kw)
        steps.append(out.logits)
    return torch.cat(steps, 1)


def _ids(T=40, B=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(32, 127, (B, T), generator=g)
    for pos, ch in ((7, "."), (19, "\n"), (30, "!")):
        if pos < T:
            ids[:, pos] = ord(ch)
    return ids


def _randomise_corrections(model, std=0.5):
    with torch.no_grad():
        for n, p in memory_parameters(model).items():
            if ".deltas." in n:
                p.normal_(0, std)


@pytest.mark.parametrize(
    "cfg",
    [
        DeltaMemConfig(),
        DeltaMemConfig(write_granularity="sentence", state_update_mode="lambda_outside"),
        DeltaMemConfig(write_granularity="message", couple_lambda=False, delta_targets=("q", "k", "v", "o")),
        DeltaMemConfig(state_update_mode="no_lambda", heads=2, rank=4),
    ],
)
def test_zero_corrections_give_backbone_logits_exactly(tiny_llama, cfg):
    ids = _ids()
    with torch.no_grad():
        ref = tiny_llama(input_ids=ids).logits
        attach_delta_mem(tiny_llama, cfg)
        out = tiny_llama(input_ids=ids).logits
        out2 = tiny_llama(input_ids=ids).logits  # with a non-empty state too
    assert torch.equal(out, ref) and torch.equal(out2, ref)
    assert all(s.shape == (2, cfg.heads, cfg.rank, cfg.rank) for s in get_state(tiny_llama))
    detach_delta_mem(tiny_llama)
    with torch.no_grad():
        assert torch.equal(tiny_llama(input_ids=ids).logits, ref)


def test_nonzero_corrections_change_logits_and_the_memory_carries(tiny_llama):
    ids = _ids()
    attach_delta_mem(tiny_llama)
    _randomise_corrections(tiny_llama)
    with torch.no_grad():
        a = tiny_llama(input_ids=ids).logits
        b = tiny_llama(input_ids=ids).logits
        reset_state(tiny_llama)
        c = tiny_llama(input_ids=ids).logits
    assert (a - b).abs().max() > 1e-4  # second pass reads the first one's writes
    assert torch.equal(a, c)  # reset empties the memory


def test_backbone_receives_no_gradient(tiny_llama):
    attach_delta_mem(tiny_llama)
    _randomise_corrections(tiny_llama, 0.1)
    ids = _ids()
    tiny_llama(input_ids=ids[:, :20])
    loss = tiny_llama(input_ids=ids[:, 20:]).logits.logsumexp(-1).mean()  # through the carried state
    loss.backward()
    mem = set(memory_parameters(tiny_llama))
    for n, p in tiny_llama.named_parameters():
        if n in mem:
            assert p.grad is not None and p.grad.abs().sum() > 0, n
        else:
            assert not p.requires_grad and p.grad is None, n


@pytest.mark.parametrize("granularity", ["token", "sentence", "message"])
def test_layer_read_at_t_independent_of_x_t_and_streaming_equals_one_call(granularity):
    from delta_mem.memory import DeltaMemLayer, _Context

    torch.manual_seed(0)
    cfg = DeltaMemConfig(write_granularity=granularity).validate()
    layer = DeltaMemLayer(16, {"q": 16, "o": 16}, cfg, 0).double()
    layer.context = _Context()
    ids = _ids(T=24, B=2)
    ids[:, 11] = ord("\n")  # a boundary at t = 11 for every granularity
    x = torch.randn(2, 24, 16, dtype=torch.float64)
    layer.context.input_ids = ids
    with torch.no_grad():
        r = layer(x)
        S = layer.state
        t = 11
        x2 = x.clone()
        x2[:, t] += torch.randn(2, 16, dtype=torch.float64)
        layer.reset()
        r2 = layer(x2)
    q_t = layer.features(x2)[0]  # the perturbed query is used at t, against the old state
    torch.testing.assert_close(r2[:, :t], r[:, :t], rtol=0, atol=0)
    layer.reset()
    layer.context.input_ids = ids[:, :t]
    with torch.no_grad():  # the state before t, then the read at t with x2's query
        layer(x[:, :t])
        S_prev = layer.state
    expect = layer.scale * (S_prev * q_t[:, :, t, None, :]).sum(-1).reshape(2, -1)  # reads carry α/r
    torch.testing.assert_close(r2[:, t], expect, rtol=1e-12, atol=1e-12)
    assert (r2[:, t + 1 :] - r[:, t + 1 :]).abs().max() > 1e-6  # the write at t is seen later
    # streaming in two calls equals one call (state and segment accumulators carry)
    layer.reset()
    layer.context.input_ids = ids[:, :9]
    with torch.no_grad():
        a = layer(x[:, :9])
        layer.context.input_ids = ids[:, 9:]
        b = layer(x[:, 9:])
    torch.testing.assert_close(torch.cat([a, b], 1), r, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(layer.state, S, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("granularity", ["token", "sentence"])
def test_cached_decoding_equals_full_forward(tiny_llama, granularity):
    attach_delta_mem(tiny_llama, DeltaMemConfig(write_granularity=granularity))
    _randomise_corrections(tiny_llama)
    ids = _ids(T=24, B=1)
    with torch.no_grad():
        reset_state(tiny_llama)
        full = tiny_llama(input_ids=ids).logits
        stepped = _prefill_then_decode(tiny_llama, ids, 16)
    torch.testing.assert_close(stepped, full, rtol=1e-4, atol=1e-5)


def test_save_load_round_trip_and_fingerprint(tiny_llama, tmp_path):
    backbone = copy.deepcopy(tiny_llama)
    attach_delta_mem(tiny_llama, DeltaMemConfig(write_granularity="message"))
    _randomise_corrections(tiny_llama)
    ids = _ids()
    with torch.no_grad():
        ref = tiny_llama(input_ids=ids).logits
    path = save_adapter(tiny_llama, tmp_path / "a.safetensors")
    assert path.stat().st_size < 1024 * 1024
    other = copy.deepcopy(backbone)
    cfg = load_adapter(other, path)
    assert cfg.write_granularity == "message"
    assert count_memory_parameters(other) == count_memory_parameters(tiny_llama)
    with torch.no_grad():
        assert torch.equal(other(input_ids=ids).logits, ref)
    # another backbone: a clear error, and the model is left untouched
    from delta_mem.experiments import random_llama

    stranger = random_llama(1, hidden=32, layers=2)
    assert backbone_fingerprint(stranger) != backbone_fingerprint(backbone)
    with pytest.raises(InputError, match="another backbone"):
        load_adapter(stranger, path)
    assert not memory_layers(stranger)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(InputError, match="not a readable safetensors"):
        load_adapter(copy.deepcopy(backbone), bad)
    with pytest.raises(InputError, match="is not a file"):
        load_adapter(copy.deepcopy(backbone), tmp_path / "missing.safetensors")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_adapter_loads_on_the_same_backbone_in_another_precision(tiny_llama, tmp_path, dtype):
    """A float32-trained adapter attaches to the same checkpoint cast to bf16/fp16 (the fingerprint used
    to hash the dtype and refused it), and an adapter saved from the cast model attaches back; a backbone
    perturbed by 1% is still refused in either precision."""
    backbone = copy.deepcopy(tiny_llama)
    attach_delta_mem(tiny_llama, DeltaMemConfig())
    _randomise_corrections(tiny_llama)
    path = save_adapter(tiny_llama, tmp_path / "a.safetensors")
    cast = copy.deepcopy(backbone).to(dtype)
    load_adapter(cast, path)
    ids = _ids()
    with torch.no_grad():
        want = tiny_llama(input_ids=ids).logits
        reset_state(cast)
        got = cast(input_ids=ids).logits.float()
    assert (got - want).abs().max() <= 0.05 * want.abs().max()  # the same model, in lower precision
    back = save_adapter(cast, tmp_path / "cast.safetensors")
    load_adapter(copy.deepcopy(backbone), back)
    perturbed = copy.deepcopy(backbone)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in perturbed.parameters():
            p.mul_(1 + 0.01 * torch.randn_like(p))
    for model in (perturbed, copy.deepcopy(perturbed).to(dtype)):
        with pytest.raises(InputError, match="another backbone"):
            load_adapter(model, path)


def test_fingerprint_precision_rule():
    from delta_mem.io import _same_values

    x = torch.randn(64, dtype=torch.float64).tolist()
    dtypes = ("float32", "bfloat16", "float16")
    as_ = {d: torch.tensor(x).to(getattr(torch, d)).double().tolist() for d in dtypes}
    assert _same_values(as_["float32"], "float32", as_["bfloat16"], "bfloat16")
    assert _same_values(as_["float16"], "float16", as_["float32"], "float32")
    assert _same_values(as_["bfloat16"], "bfloat16", as_["float16"], "float16")
    nudged = [v * (1 + 2.0**-9) for v in as_["float32"]]  # below bf16's rounding but not float32's
    assert not _same_values(nudged, "float32", as_["float32"], "float32")
    assert not _same_values(as_["float32"], "float32", as_["float32"][:-1], "float32")
    assert not _same_values(as_["float32"], "complex", as_["float32"], "float32")


def test_adapters_with_the_first_fingerprint_format_still_load(tiny_llama, tmp_path):
    from delta_mem.io import _legacy_fingerprint, same_backbone

    assert same_backbone(_legacy_fingerprint(tiny_llama), tiny_llama)
    assert not same_backbone(_legacy_fingerprint(tiny_llama), tiny_llama.to(torch.bfloat16))
    assert not same_backbone("{not json", tiny_llama)


def test_corrupt_adapters_are_refused(tiny_llama, tmp_path):
    from safetensors.torch import load_file, save_file

    backbone = copy.deepcopy(tiny_llama)
    attach_delta_mem(tiny_llama, DeltaMemConfig())
    path = save_adapter(tiny_llama, tmp_path / "a.safetensors")
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    tensors = load_file(path)
    name = next(iter(tensors))
    nan = {**tensors, name: torch.full_like(tensors[name], float("nan"))}
    bad_meta = {**meta, "config": "{not json"}
    for i, (tens, md, match) in enumerate(
        [
            (nan, meta, "non-finite"),
            (tensors, bad_meta, "not valid JSON"),
            (tensors, {**meta, "config": '{"rank": 8, "colour": 1}'}, "unknown keys"),
            (tensors, {k: v for k, v in meta.items() if k != "fingerprint"}, "corrupt metadata"),
            # a config that no longer matches its tensors is refused before it allocates anything
            (tensors, {**meta, "config": meta["config"].replace('"rank": 8', '"rank": 1000000000')}, "rank"),
            (tensors, {**meta, "config": meta["config"].replace('"heads": 1', '"heads": 3')}, "heads 3"),
        ]
    ):
        bad = tmp_path / f"bad{i}.safetensors"
        save_file(tens, bad, metadata=md)
        model = copy.deepcopy(backbone)
        with pytest.raises(InputError, match=match):
            load_adapter(model, bad)
        assert not memory_layers(model)


def test_config_refuses_quiet_mistakes():
    for kwargs, match in (
        ({"layers": ()}, "layers"),
        ({"alpha": -1.0}, "alpha"),
        ({"delta_targets": "qo"}, "delta_targets"),
        ({"couple_lambda": "no"}, "couple_lambda"),
    ):
        with pytest.raises(InputError, match=match):
            DeltaMemConfig(**kwargs).validate()


def test_bad_inputs(tiny_llama):
    with pytest.raises(InputError, match="rank"):
        attach_delta_mem(tiny_llama, DeltaMemConfig(rank=0))
    with pytest.raises(InputError, match="write_granularity"):
        attach_delta_mem(tiny_llama, DeltaMemConfig(write_granularity="paragraph"))
    with pytest.raises(InputError, match="layers"):
        attach_delta_mem(tiny_llama, DeltaMemConfig(layers=(5,)))

    class GPT2Like(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = torch.nn.Module()
            self.attn.c_attn = torch.nn.Linear(8, 24)
            self.attn.c_proj = torch.nn.Linear(8, 8)

    with pytest.raises(InputError, match=r"q_proj.*found: Module\(c_attn,c_proj\) at attn"):
        attach_delta_mem(GPT2Like())
    attach_delta_mem(tiny_llama)
    with pytest.raises(InputError, match="already"):
        attach_delta_mem(tiny_llama)
    emb = tiny_llama.get_input_embeddings()(_ids())
    emb[0, 3, 0] = float("nan")
    with pytest.raises(InputError, match="NaN"):
        tiny_llama(inputs_embeds=emb)
    reset_state(tiny_llama)
    tiny_llama(input_ids=_ids(B=2))
    with pytest.raises(InputError, match="batch size"):
        tiny_llama(input_ids=_ids(B=3))


def test_sentence_granularity_needs_input_ids(tiny_llama):
    attach_delta_mem(tiny_llama, DeltaMemConfig(write_granularity="sentence"))
    emb = tiny_llama.get_input_embeddings()(_ids())
    with pytest.raises(InputError, match="input_ids"):
        tiny_llama(inputs_embeds=emb)


def test_default_state_is_8x8_and_adapter_is_small():
    from delta_mem.experiments import random_llama

    m = random_llama(0, hidden=256, layers=4)
    attach_delta_mem(m)
    assert all(layer.cfg.rank == 8 for layer in memory_layers(m))
    n = count_memory_parameters(m)
    assert 4 * n < 400 * 1024  # float32 bytes: a few hundred KB for a 256-wide, 4-layer backbone


def test_fused_corrections_equal_the_plain_ones_and_deepcopy_stays_separate(tiny_llama, monkeypatch):
    import delta_mem.wrap as wrap

    attach_delta_mem(tiny_llama, DeltaMemConfig(delta_targets=("q", "k", "v", "o")))
    _randomise_corrections(tiny_llama, 0.1)
    ids = _ids(T=12)

    def run():
        reset_state(tiny_llama)
        out = tiny_llama(input_ids=ids).logits
        out.logsumexp(-1).mean().backward()
        grads = {n: p.grad.clone() for n, p in memory_parameters(tiny_llama).items()}
        tiny_llama.zero_grad()
        return out.detach(), grads

    fused, fused_grads = run()

    monkeypatch.setattr(wrap, "_add_correction", lambda y, layer, t: wrap._add(y, layer.correction(t)))
    plain, plain_grads = run()
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-6)
    for n, g in plain_grads.items():
        torch.testing.assert_close(fused_grads[n], g, rtol=1e-4, atol=1e-6)
    reset_state(tiny_llama)  # a state holding an autograd graph cannot be deep-copied
    twin = copy.deepcopy(tiny_llama)  # the patched projections follow the copy, not the original
    with torch.no_grad():
        twin(input_ids=ids)
    assert all(s is None for s in get_state(tiny_llama)) and all(s is not None for s in get_state(twin))


@pytest.mark.parametrize(
    "cfg",
    [
        DeltaMemConfig(state_update_mode="no_lambda", rank=4),  # the mode of every README run
        DeltaMemConfig(state_update_mode="lambda_outside", rank=4),
        DeltaMemConfig(couple_lambda=False, heads=2, rank=4),
        DeltaMemConfig(state_update_mode="no_lambda", heads=2, rank=4),
    ],
)
def test_every_decode_fast_path_equals_the_full_forward_in_float64(tiny_llama, cfg):
    attach_delta_mem(tiny_llama, cfg)
    tiny_llama.double()
    _randomise_corrections(tiny_llama)
    ids = _ids(T=20, B=2)
    with torch.no_grad():
        reset_state(tiny_llama)
        full = tiny_llama(input_ids=ids).logits
        S_full = [s.clone() for s in get_state(tiny_llama)]
        stepped = _prefill_then_decode(tiny_llama, ids, 8)
    torch.testing.assert_close(stepped, full, rtol=0, atol=1e-12)
    for a, b in zip(get_state(tiny_llama), S_full):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_a_nan_decode_step_is_named_at_the_next_checked_call(tiny_llama):
    attach_delta_mem(tiny_llama)
    ids = _ids(T=8, B=1)
    with torch.no_grad():
        out = tiny_llama(input_ids=ids, use_cache=True)
        emb = tiny_llama.get_input_embeddings()(ids[:, :1])
        emb[0, 0, 0] = float("nan")
        kw = (
            {"cache": out.cache}
            if getattr(out, "cache", None) is not None
            else {"past_key_values": out.past_key_values}
        )
        tiny_llama(inputs_embeds=emb, use_cache=True, **kw)  # a decode step: unchecked, for speed
        with pytest.raises(InputError, match="memory state of δ-Mem layer 0 holds NaN"):
            tiny_llama(input_ids=ids)  # used to blame layer 1's hidden states
        reset_state(tiny_llama)
        assert torch.isfinite(tiny_llama(input_ids=ids).logits).all()


def test_config_sizes_are_integers_and_bounded_by_the_hidden_size(tiny_llama):
    cfg = DeltaMemConfig(rank=2.0, heads=2.0, chunk=4.0).validate()  # was a TypeError in nn.Linear
    assert (type(cfg.rank), type(cfg.heads), type(cfg.chunk)) == (int, int, int)
    attach_delta_mem(tiny_llama, cfg)
    detach_delta_mem(tiny_llama)
    with pytest.raises(InputError, match=r"heads × rank = 1 × 1000000000 .* hidden size 32"):
        attach_delta_mem(tiny_llama, DeltaMemConfig(rank=10**9))  # was a failed 4 TB allocation
    assert not memory_layers(tiny_llama)


def test_casting_the_model_mid_conversation_keeps_the_memory(tiny_llama):
    attach_delta_mem(tiny_llama, DeltaMemConfig(write_granularity="sentence"))
    ids = _ids(T=12, B=1)
    with torch.no_grad():
        tiny_llama(input_ids=ids)
        tiny_llama.double()  # the float32 state and segment sums follow the new dtype
        tiny_llama(input_ids=ids)
    assert all(s.dtype == torch.float64 for s in get_state(tiny_llama))


def test_a_failed_load_leaves_the_backbone_trainable_as_it_was(tiny_llama, tmp_path):
    """Attaching freezes the backbone; a load refused after attaching (an adapter that does not fit this
    model, with check_backbone=False) detached the memory but left every backbone parameter frozen."""
    from delta_mem.experiments import random_llama

    attach_delta_mem(tiny_llama)
    path = save_adapter(tiny_llama, tmp_path / "a.safetensors")
    other = random_llama(0, hidden=32, layers=3)  # one more attention layer than the adapter has
    other.model.layers[0].mlp.requires_grad_(False)  # a mix, to check each flag is restored
    before = [p.requires_grad for p in other.parameters()]
    with pytest.raises(InputError, match="does not fit this model"):
        load_adapter(other, path, check_backbone=False)
    assert not memory_layers(other)
    assert [p.requires_grad for p in other.parameters()] == before


def test_public_api_refuses_wrong_types_with_one_named_error(tiny_llama, tmp_path):
    from delta_mem.io import same_backbone
    from delta_mem.scan import scan_chunked, scan_recurrent

    with pytest.raises(InputError, match="config must be a DeltaMemConfig"):
        attach_delta_mem(tiny_llama, {"rank": 4})  # was an AttributeError on .validate
    for kwargs, match in (({"layers": 1}, "layers must be a list"), ({"boundary_ids": 10}, "boundary_ids")):
        with pytest.raises(InputError, match=match):  # were TypeErrors ('int' object is not iterable)
            DeltaMemConfig(**kwargs).validate()
    with pytest.raises(InputError, match="adapter path"):
        load_adapter(tiny_llama, None)
    with pytest.raises(InputError, match=r"model must be a torch\.nn\.Module"):
        load_adapter(None, tmp_path / "a.safetensors")
    with pytest.raises(InputError, match="fingerprint must be"):
        same_backbone(None, tiny_llama)
    q = torch.randn(1, 1, 4, 3, dtype=torch.float64)
    for fn in (scan_recurrent, scan_chunked):
        with pytest.raises(InputError, match="v must be a tensor, got None"):  # was an AttributeError
            fn(q, q, None, q, q, q)


def test_a_memory_layer_checks_the_shape_of_its_input():
    from delta_mem.memory import DeltaMemLayer

    layer = DeltaMemLayer(16, {"q": 16, "o": 16}, DeltaMemConfig().validate(), 0)
    for bad in (torch.randn(3, 16), torch.randn(1, 3, 8), torch.ones(1, 3, 16, dtype=torch.long)):
        with torch.no_grad(), pytest.raises(InputError, match=r"must be a float \(batch, tokens, 16\)"):
            layer(bad)  # were an unpacking ValueError, a matmul RuntimeError, a silent cast of integers
    with torch.no_grad():
        assert layer(torch.randn(2, 0, 16)).shape == (2, 0, 8)  # was a reshape RuntimeError
    assert layer.state is None


def test_a_projection_named_twice_in_delta_targets_is_refused():
    """('q', 'q') was accepted silently."""
    with pytest.raises(InputError, match="names a projection twice"):
        DeltaMemConfig(delta_targets=("q", "q")).validate()
    assert DeltaMemConfig(delta_targets=("q", "o")).validate().delta_targets == ("q", "o")


def test_a_direct_call_of_the_decoder_stack_sees_its_own_ids(tiny_llama):
    """The ids hook sat on the outer model only: calling tiny_llama.model(...) directly with sentence
    writes reused the previous outer call's input_ids when the shapes matched (stale boundaries)."""
    attach_delta_mem(tiny_llama, DeltaMemConfig(write_granularity="sentence"))
    for p in memory_parameters(tiny_llama).values():  # non-zero corrections, so the memory shows
        torch.nn.init.normal_(p, std=0.3, generator=torch.Generator().manual_seed(p.numel()))
    ids, other = _ids(T=24, B=1, seed=0), _ids(T=24, B=1, seed=1)
    other[:, [3, 11]] = ord(".")  # different sentence boundaries, same shape
    with torch.no_grad():
        reset_state(tiny_llama)
        want = tiny_llama.model(input_ids=other).last_hidden_state
        reset_state(tiny_llama)
        tiny_llama(input_ids=ids)  # the outer call's ids must not leak into the next direct call
        reset_state(tiny_llama)
        got = tiny_llama.model(input_ids=other).last_hidden_state
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(InputError, match="input_ids"):  # and no ids are kept after a call
        tiny_llama.model(inputs_embeds=tiny_llama.get_input_embeddings()(other))


def test_gradient_checkpointing_is_refused_while_training(tiny_llama):
    attach_delta_mem(tiny_llama)
    enable = getattr(tiny_llama, "activation_checkpointing_enable", None)  # the newer name
    (enable or tiny_llama.gradient_checkpointing_enable)()
    tiny_llama.train()
    with pytest.raises(InputError, match=r"activation. checkpointing"):  # replays would write the state twice
        tiny_llama(input_ids=_ids())
    tiny_llama.eval()
    with torch.no_grad():  # inference never replays a forward: allowed
        tiny_llama(input_ids=_ids())
    disable = getattr(tiny_llama, "activation_checkpointing_disable", None)
    (disable or tiny_llama.gradient_checkpointing_disable)()
    tiny_llama.train()
    reset_state(tiny_llama)
    tiny_llama(input_ids=_ids()).logits.sum().backward()


def test_backbone_only_computes_the_frozen_backbone_and_leaves_the_state(tiny_llama):
    from delta_mem.wrap import backbone_only

    ids = _ids()
    with torch.no_grad():
        ref = tiny_llama(input_ids=ids).logits
    attach_delta_mem(tiny_llama)
    _randomise_corrections(tiny_llama, 0.5)
    with torch.no_grad():
        tiny_llama(input_ids=ids[:, :10])  # the memory now holds something
        wrapped = tiny_llama(input_ids=ids).logits
        with backbone_only(tiny_llama):
            bare = tiny_llama(input_ids=ids).logits
    assert not torch.allclose(wrapped, ref)  # the memory is really on
    torch.testing.assert_close(bare, ref, rtol=0, atol=0)
    reset_state(tiny_llama)
    with torch.no_grad():
        tiny_llama(input_ids=ids[:, :10])
        again = tiny_llama(input_ids=ids).logits
    torch.testing.assert_close(again, wrapped, rtol=0, atol=0)  # corrections restored on exit
    before = [s.clone() for s in get_state(tiny_llama)]
    with torch.no_grad(), backbone_only(tiny_llama):  # no read, no write inside
        tiny_llama(input_ids=ids)
    after = get_state(tiny_llama)
    assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True))


def test_the_kl_corpus_loss_is_zero_at_init_and_trains_only_the_memory(tiny_llama):
    from delta_mem.experiments import lm_loss

    ids = _ids()
    attach_delta_mem(tiny_llama)
    assert (
        float(lm_loss(tiny_llama, ids, "kl").detach()) == 0.0
    )  # zero corrections: the model is the backbone
    _randomise_corrections(tiny_llama, 0.5)
    loss = lm_loss(tiny_llama, ids, "kl")
    assert float(loss.detach()) > 0
    loss.backward()
    mem = set(memory_parameters(tiny_llama))
    grads = {n: p.grad for n, p in tiny_llama.named_parameters() if p.grad is not None}
    assert grads and set(grads) <= mem
    with pytest.raises(InputError, match="lm_loss"):
        lm_loss(tiny_llama, ids, "mse")
