"""The fused C decode step (decode_c.py, decode_step.c) against its torch twin and the whole model."""

import copy
import shutil

import delta_mem.memory as memory
import pytest
import torch
from delta_mem.decode_c import KernelUnavailable, build, kernels
from delta_mem.experiments import _cache_kwargs
from delta_mem.memory import DeltaMemConfig, DeltaMemLayer
from delta_mem.wrap import attach_delta_mem, get_state, memory_layers, reset_state

from papershelf.errors import InputError

needs_compiler = pytest.mark.skipif(kernels() is None, reason="no C compiler here: the torch twin runs")


def _layer(cfg: DeltaMemConfig, dtype, B: int, seed: int = 0) -> DeltaMemLayer:
    torch.manual_seed(seed)
    dims = {"q": 24, "k": 12, "v": 12, "o": 24}
    layer = DeltaMemLayer(24, {t: dims[t] for t in cfg.validate().delta_targets}, cfg, 0).to(dtype)
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.7)  # every gate, both signs, nonzero corrections
    layer.state = torch.randn(B, cfg.heads, cfg.rank, cfg.rank, dtype=dtype)
    return layer


@needs_compiler
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
@pytest.mark.parametrize(
    "cfg",
    [
        DeltaMemConfig(),
        DeltaMemConfig(state_update_mode="no_lambda", delta_targets=("q", "k", "v", "o")),
        DeltaMemConfig(state_update_mode="lambda_outside", heads=2, rank=4),
        DeltaMemConfig(couple_lambda=False, heads=3, rank=5, delta_targets=("o",)),
        DeltaMemConfig(couple_lambda=False, state_update_mode="no_lambda", rank=3, delta_targets=("v",)),
    ],
)
@pytest.mark.parametrize("B", [1, 3])
def test_c_step_equals_the_torch_twin(cfg, dtype, tol, B):
    twin = _layer(cfg, dtype, B)
    layer = _layer(cfg, dtype, B)
    x = torch.randn(B, 1, 24, dtype=dtype)
    with torch.no_grad():
        for _ in range(3):  # the state carries from step to step (in place on the C side)
            want = twin._decode_step(x)
            got = layer.decode_with_kernel(x)
            assert got is not None
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
            torch.testing.assert_close(layer.state, twin.state, rtol=tol, atol=tol)
            for t, lin in twin.deltas.items():
                delta = layer.kernel_deltas[t].reshape(B, 1, -1)
                torch.testing.assert_close(delta, lin(want), rtol=tol, atol=tol)
            x = torch.randn(B, 1, 24, dtype=dtype)


def _decode(model, prompt, steps):
    """Greedy decoding with a KV cache, as generate does; the logits of every step."""
    reset_state(model)
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True)
        logits = [out.logits[:, -1]]
        for _ in range(steps):
            tok = out.logits[:, -1:].argmax(-1)
            out = model(input_ids=tok, use_cache=True, **_cache_kwargs(out))
            logits.append(out.logits[:, -1])
    return torch.stack(logits, 1)


@needs_compiler
@pytest.mark.parametrize("B", [1, 2])
@pytest.mark.parametrize("targets", [("q", "o"), ("k", "v", "o"), ("o",)])
def test_decoding_with_the_c_step_equals_the_torch_twin(tiny_llama, B, targets):
    models = {}
    for backend in ("torch", "c"):
        m = copy.deepcopy(tiny_llama)
        attach_delta_mem(m, DeltaMemConfig(decode_backend=backend, delta_targets=targets, rank=4))
        torch.manual_seed(1)
        with torch.no_grad():
            for layer in memory_layers(m):
                for p in layer.parameters():
                    p.normal_(0, 0.3)
        models[backend] = m
    prompt = torch.randint(32, 127, (B, 9), generator=torch.Generator().manual_seed(0))
    want, got = (_decode(models[b], prompt, 6) for b in ("torch", "c"))
    assert (want - _decode(tiny_llama, prompt, 6)).abs().max() > 1e-3  # the memory changes the logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(get_state(models["c"]), get_state(models["torch"]), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@needs_compiler
def test_the_state_a_caller_holds_is_never_written_in_place(tiny_llama):
    attach_delta_mem(tiny_llama, DeltaMemConfig(decode_backend="c"))
    prompt = torch.randint(32, 127, (1, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = tiny_llama(input_ids=prompt, use_cache=True)
        held = get_state(tiny_llama)
        kept = [s.clone() for s in held]
        for _ in range(3):
            out = tiny_llama(input_ids=prompt[:, :1], use_cache=True, **_cache_kwargs(out))
    for h, k, now in zip(held, kept, get_state(tiny_llama), strict=True):
        torch.testing.assert_close(h, k, rtol=0, atol=0)  # the prefill's state is untouched
        assert (now - k).abs().max() > 0  # the decode steps wrote the memory's own copy
    twin = copy.deepcopy(tiny_llama)  # a model mid-conversation copies (the C step's plan is dropped)
    with torch.no_grad():
        twin(input_ids=prompt[:, :1], use_cache=True, **_cache_kwargs(copy.deepcopy(out)))
        tiny_llama(input_ids=prompt[:, :1], use_cache=True, **_cache_kwargs(out))
    for a, b in zip(get_state(twin), get_state(tiny_llama), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@needs_compiler
def test_the_c_step_follows_weights_that_move_or_are_replaced():
    cfg = DeltaMemConfig(heads=2, rank=4)
    layer, twin = _layer(cfg, torch.float32, 2), _layer(cfg, torch.float32, 2)

    def step_both(x, tol):
        want = twin._decode_step(x)
        torch.testing.assert_close(layer.decode_with_kernel(x), want, rtol=tol, atol=tol)
        torch.testing.assert_close(layer.state, twin.state, rtol=tol, atol=tol)
        for t, lin in twin.deltas.items():
            torch.testing.assert_close(layer.kernel_deltas[t], lin(want), rtol=tol, atol=tol)

    x = torch.randn(2, 1, 24)
    with torch.no_grad():
        step_both(x, 1e-5)
        new = torch.randn_like(layer.in_proj.weight)
        layer.in_proj.weight.data = new.clone()  # new storage: the plan must be rebuilt
        twin.in_proj.weight.data = new.clone()
        w = torch.randn(24, 8)
        layer.deltas["q"].weight = torch.nn.Parameter(w.clone())  # a replaced parameter
        twin.deltas["q"].weight = torch.nn.Parameter(w.clone())
        step_both(x, 1e-5)
        layer.double(), twin.double()  # cast mid-conversation: the float64 entry point takes over
        twin.state = layer.state.double()  # from one start: the float32 steps differed by rounding
        step_both(x.double(), 1e-12)
        cfg.state_update_mode = "no_lambda"  # a config edited between steps is seen too
        step_both(x.double(), 1e-12)


def test_decode_backend_is_validated():
    with pytest.raises(InputError, match="decode_backend"):
        DeltaMemConfig(decode_backend="cuda").validate()


@needs_compiler
def test_auto_falls_back_and_c_refuses_where_the_c_step_cannot_run(monkeypatch):
    cfg = DeltaMemConfig()
    layer = _layer(cfg, torch.float32, 1)
    x = torch.randn(1, 1, 24)
    assert layer.decode_with_kernel(x) is None  # autograd on and trainable memory: the torch path
    cfg.decode_backend = "c"
    with pytest.raises(InputError, match="autograd"):
        layer.decode_with_kernel(x)
    with torch.no_grad():
        layer.to(torch.bfloat16)
        with pytest.raises(InputError, match="float32 or float64"):
            layer.decode_with_kernel(x.bfloat16())
        layer.float()
        monkeypatch.setattr(memory, "kernels", lambda: None)  # as on a machine without a compiler
        monkeypatch.setattr(memory, "kernel_status", lambda: "torch (no C compiler 'cc' on PATH)")
        with pytest.raises(InputError, match="no C compiler"):
            layer.decode_with_kernel(x)
        cfg.decode_backend = "auto"
        assert layer.decode_with_kernel(x) is None


def test_auto_decoding_without_a_compiler_runs_the_torch_twin(tiny_llama, monkeypatch):
    monkeypatch.setattr(memory, "kernels", lambda: None)
    monkeypatch.setattr(memory, "kernel_status", lambda: "torch (no C compiler 'cc' on PATH)")
    attach_delta_mem(tiny_llama, DeltaMemConfig(delta_targets=("q", "v", "o")))
    twin = copy.deepcopy(tiny_llama)
    for layer in memory_layers(twin):
        layer.cfg.decode_backend = "torch"
    prompt = torch.randint(32, 127, (2, 9), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(_decode(tiny_llama, prompt, 4), _decode(twin, prompt, 4), rtol=0, atol=0)


def test_build_reuses_its_cache_and_names_a_missing_or_failing_compiler(tmp_path):
    with pytest.raises(KernelUnavailable, match="no C compiler 'no-such-cc'"):
        build(tmp_path, cc="no-such-cc")
    if shutil.which("false"):
        with pytest.raises(KernelUnavailable, match="failed to compile"):
            build(tmp_path / "f", cc="false")
        assert not list((tmp_path / "f").glob("*"))  # no half-written library is left behind
    if kernels() is None:
        pytest.skip("no C compiler here")
    lib = build(tmp_path)
    stamp = lib.stat().st_mtime_ns
    assert build(tmp_path) == lib and lib.stat().st_mtime_ns == stamp  # built once, then reused


def test_an_adapter_does_not_carry_the_decode_backend_and_set_decode_backend_checks(tiny_llama, tmp_path):
    from delta_mem.io import load_adapter, save_adapter
    from delta_mem.wrap import set_decode_backend

    with pytest.raises(InputError, match="no δ-Mem attached"):
        set_decode_backend(tiny_llama, "torch")
    backbone = copy.deepcopy(tiny_llama)
    attach_delta_mem(tiny_llama, DeltaMemConfig(decode_backend="c"))
    save_adapter(tiny_llama, tmp_path / "m.safetensors")
    cfg = load_adapter(backbone, tmp_path / "m.safetensors")
    assert cfg.decode_backend == "auto"  # the loading machine's choice, not the memory's
    set_decode_backend(backbone, "torch")
    assert all(layer.cfg.decode_backend == "torch" for layer in memory_layers(backbone))
    with pytest.raises(InputError, match="decode_backend"):
        set_decode_backend(backbone, "gpu")


@needs_compiler
def test_a_damaged_cached_library_is_rebuilt(tmp_path, monkeypatch):
    import delta_mem.decode_c as decode_c

    monkeypatch.setenv("DELTA_MEM_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(decode_c, "_loaded", {})
    build().write_bytes(b"not a shared library")  # e.g. a disk filled up while another tool wrote it
    assert decode_c.kernels() is not None and decode_c.kernel_status() == "c"


@needs_compiler
def test_edited_sizes_or_a_replaced_correction_module_never_reach_the_c_step_unchecked():
    cfg = DeltaMemConfig(heads=2, rank=4)
    layer, twin = _layer(cfg, torch.float32, 1), _layer(cfg, torch.float32, 1)
    x = torch.randn(1, 1, 24)
    with torch.no_grad():
        layer.decode_with_kernel(x), twin._decode_step(x)
        for m in (layer, twin):  # a new correction module of another width: rebuilt, and sized right
            torch.manual_seed(3)
            m.deltas["q"] = torch.nn.Linear(8, 40, bias=False)
        want = twin._decode_step(x)
        torch.testing.assert_close(layer.decode_with_kernel(x), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(
            layer.kernel_deltas["q"], twin.deltas["q"](want).view(-1), rtol=1e-5, atol=1e-5
        )
        cfg.decode_backend = "c"
        cfg.couple_lambda = False  # in_proj has the coupled layout: the C step must not read a λ block
        with pytest.raises(InputError, match="in_proj"):
            layer.decode_with_kernel(x)
        cfg.couple_lambda = True
        layer.state = torch.zeros(1, 2, 3, 3)  # a hand-set state of the wrong size: the checked path
        assert layer.decode_with_kernel(x) is None


@needs_compiler
def test_an_interrupted_attention_call_leaves_no_stale_correction(tiny_llama):
    attach_delta_mem(tiny_llama, DeltaMemConfig(delta_targets=("q", "o")))
    torch.manual_seed(1)
    with torch.no_grad():
        for layer in memory_layers(tiny_llama):
            for p in layer.parameters():
                p.normal_(0, 0.3)  # nonzero corrections: a stale one would show
    twin = copy.deepcopy(tiny_llama)
    prompt = torch.randint(32, 127, (1, 9), generator=torch.Generator().manual_seed(0))
    _decode(tiny_llama, prompt, 2)
    attn = tiny_llama.model.layers[1].self_attn
    with torch.no_grad(), pytest.raises(KeyboardInterrupt):  # Ctrl-C between q_proj and o_proj
        original = attn.k_proj.forward
        attn.k_proj.forward = lambda x: (_ for _ in ()).throw(KeyboardInterrupt)
        try:
            tiny_llama(input_ids=prompt[:, :1])
        finally:
            attn.k_proj.forward = original
    # the next call (no reset) must equal a model that holds the same memory and was never interrupted
    for mine, theirs in zip(memory_layers(tiny_llama), memory_layers(twin), strict=True):
        theirs.state = mine.state.clone()
    with torch.no_grad():
        got, want = tiny_llama(input_ids=prompt).logits, twin(input_ids=prompt).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_parametrized_projection_weight_still_decodes(tiny_llama):
    from torch.nn.utils import parametrize

    class Scale(torch.nn.Module):
        def forward(self, w):
            return 2 * w

    attach_delta_mem(tiny_llama)
    twin = copy.deepcopy(tiny_llama)
    for m in (tiny_llama, twin):
        attn = m.model.layers[0].self_attn
        if m is tiny_llama:
            parametrize.register_parametrization(attn.q_proj, "weight", Scale())
        else:
            with torch.no_grad():
                attn.q_proj.weight.mul_(2)
    prompt = torch.randint(32, 127, (1, 9), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(_decode(tiny_llama, prompt, 3), _decode(twin, prompt, 3), rtol=1e-5, atol=1e-5)
