import torch
import torch.nn.functional as F
from papershelf_lm.attention import attention, capture, greedy_generate, sdpa
from papershelf_lm.model import build_model

IDS = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(0))


def _model():
    return build_model("micro", seed=1).eval()


def test_swapping_in_the_default_function_leaves_logits_unchanged():
    model = _model()
    with torch.no_grad():
        before = model(input_ids=IDS).logits
        calls = []

        def counting(module, *args, **kwargs):
            calls.append(module.layer_idx)
            return sdpa(module, *args, **kwargs)

        with attention(model, counting):
            inside = model(input_ids=IDS).logits
        after = model(input_ids=IDS).logits
    assert torch.equal(before, inside) and torch.equal(before, after)
    assert calls == [0, 1]  # every layer went through the swapped function, once


def test_captured_qkv_reproduce_each_layers_sdpa_output():
    model = _model()
    _, layers = capture(model, IDS)
    assert len(layers) == model.config.num_hidden_layers
    groups = model.config.num_attention_heads // model.config.num_key_value_heads
    for cap in layers:
        assert cap.query.shape[1] == model.config.num_attention_heads
        assert cap.key.shape[1] == model.config.num_key_value_heads
        k = cap.key.repeat_interleave(groups, dim=1)
        v = cap.value.repeat_interleave(groups, dim=1)
        ref = F.scaled_dot_product_attention(cap.query, k, v, is_causal=True, scale=cap.scaling)
        torch.testing.assert_close(ref.transpose(1, 2), cap.output, rtol=1e-5, atol=1e-6)


def test_a_different_function_changes_the_output():
    model = _model()

    def uniform_values(module, query, key, value, attention_mask, **kwargs):
        out, w = sdpa(module, query, key, value, attention_mask, **kwargs)
        return torch.zeros_like(out), w

    with torch.no_grad(), attention(model, uniform_values):
        zeroed = model(input_ids=IDS).logits
    with torch.no_grad():
        assert not torch.allclose(zeroed, model(input_ids=IDS).logits)


def test_kv_cached_greedy_decoding_matches_full_recompute_and_uses_the_swap():
    model = _model()
    prompt = IDS[:1, :20]
    calls = []

    def counting(module, query, *args, **kwargs):
        calls.append(query.shape[2])
        return sdpa(module, query, *args, **kwargs)

    with attention(model, counting):
        cached = greedy_generate(model, prompt, 6)
    ids = prompt
    with torch.no_grad():
        for _ in range(6):
            ids = torch.cat([ids, model(input_ids=ids).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(cached, ids[:, 20:])
    layers = model.config.num_hidden_layers
    assert calls[:layers] == [20] * layers and calls[layers:] == [1] * (5 * layers)  # prefill, then 1 token
