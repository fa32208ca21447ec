"""The text task: sequence per-sample gradients, the Monte Carlo expected Fisher, the domain federation,
and one end-to-end run on the (random-init) micro testbed model."""

import itertools

import pytest
import torch
from potara_merge.cli import main
from potara_merge.experiments import SimConfig, run_seed
from potara_merge.federated import LoRALinear, forward_with, get_state, lora_model, lora_per_sample_grads
from potara_merge.fisher import diag_fisher, log_likelihood, per_sample_grads
from potara_merge.potara import estimate_traces
from potara_merge.text import DOMAINS, SequenceLM, domain_bytes, lm_lora_model, text_federation
from torch import nn

from papershelf.errors import InputError

pytest.importorskip("papershelf_lm")


class ToySeq(nn.Module):
    """A tiny causal sequence model: embedding, a projection, a causal running mean, logits (n, V, T)."""

    def __init__(self, vocab=3, d=4, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.emb = nn.Embedding(vocab, d)
        self.block = nn.Module()
        self.block.proj = nn.Linear(d, d)
        self.out = nn.Linear(d, vocab)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))

    def forward(self, ids):
        h = torch.tanh(self.block.proj(self.emb(ids)))
        h = h.cumsum(1) / torch.arange(1, ids.shape[1] + 1).reshape(1, -1, 1)  # causal: position t sees <= t
        return self.out(h).transpose(1, 2)


def _toy(seed=0):
    m = lora_model(ToySeq(seed=seed).double(), rank=2, alpha=2.0, seed=seed, targets=("proj",))
    with torch.no_grad():  # B starts at zero; give it values so every factor has a gradient
        m.block.proj.lora_B.weight.normal_(generator=torch.Generator().manual_seed(seed + 1))
    return m


def test_lora_model_targets_nested_layers_and_names_what_it_found():
    m = _toy()
    assert isinstance(m.block.proj, LoRALinear) and not isinstance(m.out, LoRALinear)
    assert sorted(get_state(m)) == ["block.proj.lora_A.weight", "block.proj.lora_B.weight"]
    with pytest.raises(InputError, match=r"no Linear layer named \['q_proj'\].*\['out', 'proj'\]"):
        lora_model(ToySeq(), targets=("q_proj",))


def test_sequence_per_sample_grads_equal_one_backward_per_window():
    m = _toy()
    X, y = torch.randint(0, 3, (5, 4)), torch.randint(0, 3, (5, 4))
    fast = lora_per_sample_grads(m, X, y)
    slow = per_sample_grads(m, X, y)
    for k in fast:
        torch.testing.assert_close(fast[k], slow[k], rtol=1e-10, atol=1e-12)
    # the window's log-likelihood is the sum over its positions
    lp = torch.log_softmax(m(X), dim=1)
    want = sum(lp[:, y[:, t], t].diagonal() for t in range(4))
    torch.testing.assert_close(log_likelihood(m(X), y), want)


def test_forward_with_nested_lora_equals_loading_the_state_and_is_differentiable():
    m = _toy()
    X = torch.randint(0, 3, (3, 4))
    state = {k: v + 0.3 for k, v in get_state(m).items()}
    got = forward_with(m, state, X)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if p.requires_grad:
                p.copy_(state[n])
    torch.testing.assert_close(got, m(X))
    leaf = {k: v.clone().requires_grad_(True) for k, v in state.items()}
    forward_with(m, leaf, X).sum().backward()
    assert all(v.grad is not None and v.grad.abs().sum() > 0 for v in leaf.values())
    assert m.block.proj.override is None  # restored


def exact_window_fisher(m, X):
    """Σ over every label window y of Π_t p_t(y_t) (∇ Σ_t log p_t(y_t))², by enumeration (V^T windows)."""
    names = [n for n, p in m.named_parameters() if p.requires_grad]
    V, T = m(X[:1]).shape[1:]
    out = {n: torch.zeros_like(m.get_parameter(n)) for n in names}
    for s in range(X.shape[0]):
        probs = torch.softmax(m(X[s : s + 1]), dim=1)[0].detach()
        for labels in itertools.product(range(V), repeat=T):
            y = torch.tensor([labels])
            weight = torch.prod(probs[list(labels), list(range(T))])
            g = per_sample_grads(m, X[s : s + 1], y, names)
            for n in names:
                out[n] += weight * g[n][0] ** 2
    return {n: v / X.shape[0] for n, v in out.items()}


def test_monte_carlo_expected_fisher_converges_to_the_enumerated_window_fisher():
    m = _toy(3)
    X = torch.randint(0, 3, (2, 3), generator=torch.Generator().manual_seed(0))
    exact = exact_window_fisher(m, X)
    gen = torch.Generator().manual_seed(1)
    mc = diag_fisher(m, X, kind="expected", samples=3000, generator=gen)
    for n in exact:
        rel = (mc[n] - exact[n]).abs().sum() / exact[n].abs().sum()
        assert rel < 0.06, (n, float(rel))  # 3000 draws: a few % Monte Carlo error


def test_sequence_traces_fast_path_equals_the_reference_path():
    m = _toy()
    fed = get_state(m)
    loc = {
        k: v + 0.1 * torch.randn(v.shape, generator=torch.Generator().manual_seed(2), dtype=v.dtype)
        for k, v in fed.items()
    }
    X, y = torch.randint(0, 3, (6, 4)), torch.randint(0, 3, (6, 4))

    class Wrapped(nn.Module):  # the same model, hidden from the LoRA fast path (not found as LoRA layers)
        def __init__(self, inner):
            super().__init__()
            self.inner = [inner]

        def forward(self, ids):
            return self.inner[0](ids)

        def named_parameters(self, *a, **k):
            return self.inner[0].named_parameters(*a, **k)

        def get_parameter(self, n):
            return self.inner[0].get_parameter(n)

    for fisher in ("expected", "empirical"):
        fast = estimate_traces(m, fed, loc, X, y, fisher=fisher, fisher_samples=2, seed=5)
        slow = estimate_traces(Wrapped(m), fed, loc, X, y, fisher=fisher, fisher_samples=2, seed=5)
        for mod in fast:
            assert fast[mod].a == pytest.approx(slow[mod].a, rel=1e-9)
            assert fast[mod].c == pytest.approx(slow[mod].c, rel=1e-9, abs=1e-12)


def test_text_federation_is_deterministic_disjoint_and_skewed_by_domain():
    fed = text_federation(4, "domain:2", seed=0, window=16, n_train=6, fisher_n=3, n_test=2)
    again = text_federation(4, "domain:2", seed=0, window=16, n_train=6, fisher_n=3, n_test=2)
    rows = []
    for c, c2 in zip(fed.clients, again.clients, strict=True):
        assert c.task == c.cid % 2
        assert torch.equal(c.X_train, c2.X_train) and torch.equal(c.y_test, c2.y_test)
        assert c.X_train.shape == (6, 16) and c.X_fisher.shape == (3, 16) and c.y_test.shape == (2, 16)
        assert torch.equal(c.X_train[:, 1:], c.y_train[:, :-1])  # targets are the inputs shifted by one
        text = domain_bytes(DOMAINS[c.task][0])
        for X, y in ((c.X_train, c.y_train), (c.X_fisher, c.y_fisher), (c.X_test, c.y_test)):
            for xr, yr in zip(X, y, strict=True):
                w = bytes(xr.tolist()) + bytes(yr[-1:].tolist())
                assert w in text  # every window is text of the client's own domain
                rows.append(w)
    assert len(set(rows)) == len(rows)  # no window is dealt twice (train, Fisher, test, clients)
    other = text_federation(4, "domain:2", seed=1, window=16, n_train=6, fisher_n=3, n_test=2)
    assert not torch.equal(other.clients[0].X_train, fed.clients[0].X_train)


def test_text_federation_bad_input():
    with pytest.raises(InputError, match="--skew for --task text"):
        text_federation(2, "task:4")
    with pytest.raises(InputError, match="--skew for --task text"):
        text_federation(2, f"domain:{len(DOMAINS) + 1}")
    with pytest.raises(InputError, match=r"too little text.*lower --clients"):
        text_federation(3, "domain:1", window=64, n_train=100_000)
    with pytest.raises(InputError, match="--clients"):
        text_federation(0, "iid")
    mix = text_federation(3, "dirichlet:0.3", seed=0, window=8, n_train=4, fisher_n=2, n_test=2)
    assert all(0 <= c.task < len(DOMAINS) for c in mix.clients)


def test_sequence_lm_reads_logits_with_the_class_axis_first():
    m = lm_lora_model("micro", rank=2, alpha=4.0)
    assert isinstance(m, SequenceLM)
    ids = torch.randint(0, 256, (2, 5))
    assert m(ids).shape == (2, m.lm.config.vocab_size, 5)
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in get_state(m)} == {"q_proj", "v_proj"}
    with pytest.raises(InputError, match="int64"):
        m(ids.float())


def test_text_run_end_to_end_on_the_micro_model():
    cfg = SimConfig(
        task="text",
        lm="micro",
        n_clients=2,
        rounds=2,
        skew="domain:2",
        window=16,
        text_train=8,
        text_test=4,
        fisher_n=4,
        local_model_steps=3,
        batch=4,
        ft_curve_points=1,
        curve_every=2,
        grid=(0.0, 0.5, 1.0),
    )
    res = run_seed(cfg, 0, log=lambda *_: None)
    assert all(0 <= v <= 100 for v in res["accs"].values())
    assert sorted(res["potara_curve"]) == [0, 1, 2]  # every curve_every-th round, plus Potara's and the last
    assert res["bytes_at"][2] == 2 * 2 * 2 * res["adapter_bytes"]  # rounds × clients × adapter, each way
    assert all(0 <= lam <= 1 for lam in res["potara_lambdas"])


def test_cli_text_task_bad_input(capsys):
    assert main(["simulate", "--task", "text", "--skew", "task:4"]) == 2
    assert "--skew for --task text" in capsys.readouterr().err
    assert main(["simulate", "--task", "text", "--skew", "domain:2", "--window", "1"]) == 2
    assert "--window" in capsys.readouterr().err
    assert main(["reproduce", "--task", "text", "--skews", "domain:2", "--fisher-samples", "0"]) == 2
    assert "--fisher-samples" in capsys.readouterr().err


# peft's loader calls a transformers property that transformers deprecates (their interplay, not ours)
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_text_adapter_saved_as_a_peft_folder_reproduces_the_logits_in_peft(tmp_path):
    from papershelf_lm.model import build_model
    from peft import PeftModel
    from potara_merge.text import save_text_adapter

    ours = lm_lora_model("micro", rank=2, alpha=4.0, seed=0)
    with torch.no_grad():
        for n, p in ours.named_parameters():
            if "lora_B" in n:
                p.normal_(generator=torch.Generator().manual_seed(len(n)))
    folder = save_text_adapter(tmp_path / "client0", get_state(ours), rank=2, alpha=4.0)
    peft_model = PeftModel.from_pretrained(build_model("micro", seed=0).eval(), str(folder))
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(peft_model(input_ids=ids).logits.transpose(1, 2), ours(ids))
    with pytest.raises(InputError, match="not an lm_lora_model adapter key"):
        save_text_adapter(tmp_path / "x", {"0.lora_A.weight": torch.zeros(2, 2)}, rank=2, alpha=4.0)
