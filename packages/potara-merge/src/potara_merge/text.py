"""The text task: personalised next-byte prediction on the LM testbed's corpus with a frozen small Llama.

Clients write code (and prose) in different *domains* of the CPython standard library — the character-map
tables of ``encodings``, the English help topics of ``pydoc_data``, the GUI wrappers of ``tkinter``, the
assertions of ``unittest``, … — and each fine-tunes one LoRA adapter (query and value projections) on a
frozen testbed model (``papershelf-lm``'s ``tiny-s`` by default). Like the instructions of the paper's FLAN
tasks, the text itself tells which domain it is from, so one federated adapter can serve every client.

A sample is a window of ``window`` bytes and its targets (the window shifted by one byte); the model's
logits are ``(n, vocab, window)`` (class axis 1), so training, accuracy (top-1 over every position), the
Fisher and the gradient correlation are those of the digits task, one window per sample.

Skews (``--skew`` with ``--task text``):

* ``domain:T`` — task skew: client i writes domain ``i mod T`` only (1 <= T <= 8, the first T of
  :data:`DOMAINS`);
* ``dirichlet:A`` — mixture skew: client i's windows come from the 8 domains in Dirichlet(A) proportions;
* ``iid`` — every client draws from the 8 domains equally.

Splits never share text: each domain's bytes are cut into consecutive windows, grouped into blocks of
:data:`BLOCK` consecutive windows, and the shuffled blocks are dealt out whole (a client's train, Fisher
and test windows come from different blocks, and no two clients share a block). ``papershelf-lm`` is
needed (``pip install 'potara-merge[bench]'``); it reads the running interpreter's standard library.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from papershelf.errors import InputError, check_int
from potara_merge.data import ClientData, Federation, parse_skew_kinds

# (name, path prefix inside the standard library): styles chosen to differ (tables, prose, GUI, tests, ...)
DOMAINS = (
    ("encodings", "encodings/"),
    ("pydoc_data", "pydoc_data/"),
    ("tkinter", "tkinter/"),
    ("unittest", "unittest/"),
    ("asyncio", "asyncio/"),
    ("email", "email/"),
    ("idlelib", "idlelib/"),
    ("ctypes", "ctypes/"),
)
BLOCK = 8  # consecutive windows dealt out together, so neighbouring text stays in one split
TEXT_SKEW_HELP = f"'domain:T' (integer 1 <= T <= {len(DOMAINS)}), 'dirichlet:A' (A > 0) or 'iid'"
LORA_TARGETS = ("q_proj", "v_proj")


def parse_text_skew(skew: str) -> tuple[str, float]:
    """``"domain:4"`` -> ("domain", 4); ``"dirichlet:0.3"`` -> ("dirichlet", 0.3); ``"iid"`` -> ("iid", 0)."""
    return parse_skew_kinds(
        skew, ("domain",), len(DOMAINS), f"--skew for --task text must be {TEXT_SKEW_HELP}"
    )


def _corpus():
    try:
        from papershelf_lm import corpus
    except ImportError as e:
        raise InputError(
            "the text task needs the LM testbed: pip install 'potara-merge[bench]' (papershelf-lm)"
        ) from e
    return corpus


def domain_bytes(name: str) -> bytes:
    """The training-split standard-library sources of one domain, concatenated (blank line between files)."""
    prefix = dict(DOMAINS).get(name)
    if prefix is None:
        raise InputError(f"unknown text domain {name!r}; known: {[d for d, _ in DOMAINS]}")
    corpus = _corpus()
    root = corpus.stdlib_root()
    files = [p for p in corpus.corpus_files("train") if p.relative_to(root).as_posix().startswith(prefix)]
    if not files:
        raise InputError(f"text domain {name!r}: no sources under {root / prefix}")
    return b"\n\n".join(p.read_bytes() for p in files)


@dataclass
class _Blocks:
    """One domain's windows, in shuffled blocks of consecutive windows, dealt out from the front."""

    name: str
    windows: np.ndarray  # (n_windows, window + 1) uint8
    order: list[int]  # block ids still to deal, in dealing order

    def take(self, n: int) -> np.ndarray:
        rows = []
        while sum(len(r) for r in rows) < n:
            if not self.order:
                raise InputError(
                    f"text domain {self.name!r} has too little text for this many clients and windows "
                    f"({len(self.windows)} windows of {self.windows.shape[1] - 1} bytes): lower --clients"
                )
            b = self.order.pop(0)
            rows.append(self.windows[b * BLOCK : (b + 1) * BLOCK])
        out = np.concatenate(rows)
        return out[:n]  # the unused rest of the last block is dropped, never dealt to anyone else


def _domain_blocks(name: str, window: int, rng: np.random.Generator) -> _Blocks:
    data = np.frombuffer(domain_bytes(name), dtype=np.uint8)
    n = len(data) // (window + 1)
    windows = data[: n * (window + 1)].reshape(n, window + 1)
    n_blocks = n // BLOCK
    return _Blocks(name, windows[: n_blocks * BLOCK], rng.permutation(n_blocks).tolist())


def text_federation(
    n_clients: int = 8,
    skew: str = "domain:4",
    *,
    seed: int = 0,
    window: int = 64,
    n_train: int = 64,
    fisher_n: int = 30,
    n_test: int = 32,
) -> Federation:
    """``n_clients`` clients of next-byte prediction on standard-library domains (see the module doc).

    Every client gets ``n_train`` training windows, ``fisher_n`` held-out windows for the Fisher and
    ``n_test`` test windows, each ``window`` bytes (inputs int64 byte ids, targets the next bytes).
    """
    check_int("--clients", n_clients, low=1)
    check_int("window", window, low=2, high=1024)
    for label, v in (("n_train", n_train), ("fisher_n", fisher_n), ("n_test", n_test)):
        check_int(label, v, low=1)
    kind, val = parse_text_skew(skew)
    rng = np.random.default_rng(seed)
    n_domains = int(val) if kind == "domain" else len(DOMAINS)
    blocks = [_domain_blocks(name, window, rng) for name, _ in DOMAINS[:n_domains]]

    def draw(n: int, props: np.ndarray) -> np.ndarray:
        counts = rng.multinomial(n, props) if kind != "domain" else (props * n).astype(int)
        rows = [blocks[d].take(k) for d, k in enumerate(counts) if k > 0]
        out = np.concatenate(rows)
        return out[rng.permutation(len(out))]

    clients = []
    for i in range(n_clients):
        if kind == "domain":
            props = np.eye(n_domains)[i % n_domains]
        elif kind == "dirichlet":
            props = rng.dirichlet(np.full(n_domains, val))
        else:
            props = np.full(n_domains, 1.0 / n_domains)
        split = [draw(n, props) for n in (n_train, fisher_n, n_test)]
        xs = [torch.from_numpy(s[:, :-1].astype(np.int64)) for s in split]
        ys = [torch.from_numpy(s[:, 1:].astype(np.int64)) for s in split]
        task = int(np.argmax(props))  # the client's (dominant) domain
        clients.append(ClientData(i, task, xs[0], ys[0], xs[1], ys[1], xs[2], ys[2]))
    from papershelf_lm.tokenizer import VOCAB_SIZE

    empty = torch.zeros((0, window), dtype=torch.int64)
    return Federation(empty, empty, clients, window, VOCAB_SIZE, skew)


class SequenceLM(nn.Module):
    """A causal LM read as a per-position classifier: byte ids ``(n, T)`` -> logits ``(n, vocab, T)``."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.ndim != 2 or ids.dtype != torch.int64:
            raise InputError(
                f"SequenceLM: ids must be an int64 (n, T) tensor, got {ids.dtype} {tuple(ids.shape)}"
            )
        return self.lm(input_ids=ids, use_cache=False).logits.transpose(1, 2)


def lm_lora_model(
    name: str = "tiny-s",
    *,
    rank: int = 4,
    alpha: float = 8.0,
    seed: int = 0,
    targets: tuple[str, ...] = LORA_TARGETS,
) -> SequenceLM:
    """The frozen testbed LM ``name`` (a shipped checkpoint, loaded offline; or the ``micro`` preset at
    random init, for tests) with LoRA on ``targets`` of every layer, as a :class:`SequenceLM`."""
    from potara_merge.federated import lora_model

    _corpus()  # a clear error when papershelf-lm is missing
    from papershelf_lm.model import build_model, load

    lm = build_model("micro", seed=seed) if name == "micro" else load(name)[0]
    lm.eval()  # no dropout; the LoRA factors are the only trainable tensors
    return SequenceLM(lora_model(lm, rank=rank, alpha=alpha, seed=seed, targets=targets))


def text_peft_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A :func:`lm_lora_model` adapter under PEFT's saved key names (``lm.model.layers.0...`` ->
    ``base_model.model.model.layers.0...``), for :func:`potara_merge.save_adapter`."""
    bad = [k for k in state if not k.startswith("lm.")]
    if bad:
        raise InputError(f"not an lm_lora_model adapter key: {bad[0]!r}")
    return {"base_model.model." + k.removeprefix("lm."): v for k, v in state.items()}


def save_text_adapter(path, state, *, rank: int, alpha: float, targets: tuple[str, ...] = LORA_TARGETS):
    """Write a text-task adapter (e.g. a client's personalised merge) as a PEFT LoRA folder that loads onto
    the testbed model with ``peft`` (``PeftModel.from_pretrained(papershelf_lm.load(name)[0], path)``)."""
    from potara_merge.federated import peft_config
    from potara_merge.lora import save_adapter

    return save_adapter(path, text_peft_state(state), peft_config(rank, alpha, list(targets)))
