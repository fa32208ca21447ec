"""The headline experiment at small scale: personalised federated LoRA on skewed digits clients.

For one seed and one skew, every method runs on the same clients, the same pretrained base and the same
FedAvg (FedIT) trajectory:

* FedAvg for ``rounds`` rounds; FedAvg + FT (the global adapter fine-tuned for ``local_model_steps``);
  Ditto and APFL riding on the same rounds; local-only (``local_model_steps`` on the client alone);
* Potara: FedIT for ``potara_rounds`` (default half of ``rounds``), the local adapter above, λ* in closed
  form from ``fisher_n`` held-out samples per client, merged (factors by default);
* the fixed-λ grid on Potara's endpoints (best fixed λ in hindsight, and the per-client oracle);
* communication curves: Potara's accuracy after every checkpoint round, FedAvg + FT's after a few, with
  the metered bytes of each round.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from papershelf.errors import InputError, check_int, check_number
from potara_merge.baselines import APFL, Ditto, finetune
from potara_merge.data import digits_federation, max_clients, parse_skew
from potara_merge.federated import (
    accuracy,
    base_mlp,
    fedavg,
    get_state,
    lora_model,
    mix,
    pretrain,
    set_state,
    state_bytes,
    train,
)
from potara_merge.lora import merge_lora
from potara_merge.potara import personalise
from potara_merge.weights import optimal_weight

MAX_ROUNDS = 10_000  # every round's global adapter is kept for the curves; far beyond any useful run


@dataclass
class SimConfig:
    n_clients: int = 20
    rounds: int = 30
    skew: str = "dirichlet:0.3"
    hidden: int = 64
    rank: int = 4
    lora_alpha: float = 8.0
    local_steps: int = 5  # client steps per FedAvg round
    local_model_steps: int = 100  # Potara's local adapter and FedAvg+FT's fine-tuning budget
    lr: float = 5e-3
    potara_frac: float = 0.5  # Potara's federated rounds = ceil(frac * rounds)
    ditto_mu: float = 0.1
    fisher: str = "expected"  # the Fisher proper; "empirical" (true labels) is the variant
    fisher_n: int = 30
    damping: float = 1e-3
    mode: str = "factors"
    local_init: str = "base"  # Potara's local adapter starts from the pretrained base or the federated one
    engine: str = "loop"  # the federated rounds: the in-process loop, or Flower's simulation engine
    diagnose: bool = False  # log per-client a, b, c, λ*, held-out losses and accuracy-vs-λ
    pretrain_steps: int = 300
    public_frac: float = 0.15
    grid: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(11))
    ft_curve_points: int = 3
    augment: bool = True
    batch: int = 32  # samples (digits) or windows (text) per local step
    curve_every: int = 1  # Potara's accuracy-vs-bytes curve at every curve_every-th round (and the last)
    # the text task (task = "text"): next-byte prediction on standard-library domains, frozen testbed LM
    task: str = "digits"
    lm: str = "tiny-s"
    window: int = 64
    text_train: int = 64  # training windows per client
    text_test: int = 32  # test windows per client
    fisher_samples: int = 1  # Monte Carlo label draws per window for a sequence model's expected Fisher
    extra: dict = field(default_factory=dict)

    def validate(self) -> SimConfig:
        if self.task not in ("digits", "text"):
            raise InputError(f"--task must be digits or text; got {self.task!r}")
        if self.task == "text":
            from potara_merge.text import parse_text_skew

            check_int("--clients", self.n_clients, low=1, high=1000)
            parse_text_skew(self.skew)
            check_int("--window", self.window, low=2, high=1024)
            check_int("--fisher-samples", self.fisher_samples, low=1)
        else:
            check_number("public_frac", self.public_frac, low=0, high=1, high_open=True)
            # digits has room for this many clients of 12 images (checked here, before any skew runs)
            check_int("--clients", self.n_clients, low=1, high=max_clients(self.public_frac))
            parse_skew(self.skew)
        check_int("--rounds", self.rounds, low=1, high=MAX_ROUNDS)
        check_int("--batch", self.batch, low=1)
        check_int("--curve-every", self.curve_every, low=1)
        check_int("--rank", self.rank, low=1)
        check_int("--local-steps", self.local_steps, low=1)
        check_int("--local-model-steps", self.local_model_steps, low=1)
        check_number("--potara-frac", self.potara_frac, low=0, high=1, low_open=True)
        check_number("--lr", self.lr, low=0, low_open=True)
        if self.mode not in ("factors", "product"):
            raise InputError(f"--mode must be factors or product; got {self.mode!r}")
        if self.local_init not in ("base", "federated"):
            raise InputError(f"--local-init must be base or federated; got {self.local_init!r}")
        if self.engine not in ("loop", "flower"):
            raise InputError(f"--engine must be loop or flower; got {self.engine!r}")
        if self.engine == "flower":  # missing flwr is said before any training, not after pretraining
            from potara_merge.flower import require_flower

            require_flower()
        if self.fisher not in ("empirical", "expected"):
            raise InputError(f"--fisher must be empirical or expected; got {self.fisher!r}")
        return self

    @property
    def potara_rounds(self) -> int:
        return max(1, math.ceil(self.potara_frac * self.rounds))


def _mean(xs) -> float:
    return float(np.mean(xs))


def accuracy_barrier(acc_vs_lambda: dict[float, float]) -> float:
    """Largest drop (points) of the accuracy along the merge path below the chord between its endpoints:
    ``max_λ [(1 − λ) acc(0) + λ acc(1) − acc(λ)]``, floored at 0.

    Linear mode connectivity (the premise of Potara's bound) means no barrier: every merge is at least as
    good as the chord. A large barrier means the two adapters sit in different basins, and then no λ
    inside (0, 1) can be trusted, whatever the variance traces say."""
    if 0.0 not in acc_vs_lambda or 1.0 not in acc_vs_lambda:
        raise InputError("accuracy_barrier needs the accuracies at λ = 0 and λ = 1")
    a0, a1 = acc_vs_lambda[0.0], acc_vs_lambda[1.0]
    return max(0.0, max((1 - lam) * a0 + lam * a1 - acc for lam, acc in acc_vs_lambda.items()))


def federation(cfg: SimConfig, seed: int):
    """The clients of ``cfg.task`` for one seed."""
    if cfg.task == "text":
        from potara_merge.text import text_federation

        return text_federation(
            cfg.n_clients,
            cfg.skew,
            seed=seed,
            window=cfg.window,
            n_train=cfg.text_train,
            fisher_n=cfg.fisher_n,
            n_test=cfg.text_test,
        )
    return digits_federation(
        cfg.n_clients,
        cfg.skew,
        seed=seed,
        fisher_n=cfg.fisher_n,
        public_frac=cfg.public_frac,
        augment=cfg.augment,
    )


def _fedavg_engine(engine: str):
    """The federated phase: the in-process loop, or the same rounds carried by Flower (``flwr``)."""
    if engine == "flower":
        from potara_merge.flower import fedavg_flower

        return fedavg_flower
    return fedavg


def build_models(cfg: SimConfig, fed, seed: int):
    """The LoRA model the methods share, and a factory for the same base with a rank-2r adapter (where
    product-mode merges are evaluated). Digits: an MLP pretrained on the public split; text: the LM."""
    if cfg.task == "text":
        from potara_merge.text import lm_lora_model

        model = lm_lora_model(cfg.lm, rank=cfg.rank, alpha=cfg.lora_alpha, seed=seed)
        return model, lambda: lm_lora_model(cfg.lm, rank=2 * cfg.rank, alpha=2 * cfg.lora_alpha, seed=seed)
    base = base_mlp(fed.n_features, cfg.hidden, fed.n_classes, seed=seed)
    pretrain(base, fed.public_X, fed.public_y, steps=cfg.pretrain_steps, seed=seed)
    base_copy = copy.deepcopy(base)
    model = lora_model(base, rank=cfg.rank, alpha=cfg.lora_alpha, seed=seed)
    return model, lambda: lora_model(
        copy.deepcopy(base_copy), rank=2 * cfg.rank, alpha=2 * cfg.lora_alpha, seed=seed
    )


def run_seed(cfg: SimConfig, seed: int, *, log=print) -> dict:
    """One seed of every method on one federation; accuracies are means over clients (in %)."""
    cfg.validate()
    t0 = time.perf_counter()
    fed = federation(cfg, seed)
    clients = fed.clients
    model, product_model = build_models(cfg, fed, seed)
    init = get_state(model)
    config = {"r": cfg.rank, "lora_alpha": cfg.lora_alpha}
    R, Rp = cfg.rounds, cfg.potara_rounds

    ditto = Ditto(
        model, clients, init, mu=cfg.ditto_mu, steps=cfg.local_steps, lr=cfg.lr, batch=cfg.batch, seed=seed
    )
    apfl = APFL(model, clients, init, steps=cfg.local_steps, lr=cfg.lr, batch=cfg.batch, seed=seed)

    def hook(r, w, locs):
        ditto.on_round(r, w, locs)
        apfl.on_round(r, w, locs)

    ft_points = sorted(
        {max(1, round(R * k / cfg.ft_curve_points)) for k in range(1, cfg.ft_curve_points + 1)}
    )
    curve_rounds = sorted({*range(0, R + 1, cfg.curve_every), R, Rp})
    run = _fedavg_engine(cfg.engine)(
        model,
        clients,
        init,
        rounds=R,
        local_steps=cfg.local_steps,
        lr=cfg.lr,
        batch=cfg.batch,
        seed=seed,
        on_round=hook,
        checkpoints=sorted({*curve_rounds, *ft_points}),
    )
    t_fed = time.perf_counter()
    wR = run.checkpoints[R]

    def acc(state, c):
        return 100.0 * accuracy(model, state, c.X_test, c.y_test)

    wp = run.checkpoints[Rp]

    # local adapters (no communication): from the base (an independent local LoRA) or from Potara's
    # federated adapter (local fine-tuning after the federated phase); the other one is a variant
    def local_adapters(start):
        return [
            train(
                model,
                start,
                c.X_train,
                c.y_train,
                steps=cfg.local_model_steps,
                lr=cfg.lr,
                batch=cfg.batch,
                seed=seed * 131 + c.cid,
            )
            for c in clients
        ]

    locs_base = local_adapters(init)
    locs_fed = local_adapters(wp)
    locs = locs_base if cfg.local_init == "base" else locs_fed
    res: dict = {"seed": seed, "skew": cfg.skew}
    accs: dict[str, float] = {}
    accs["local"] = _mean([acc(s, c) for s, c in zip(locs_base, clients, strict=True)])
    accs["local_from_fed"] = _mean([acc(s, c) for s, c in zip(locs_fed, clients, strict=True)])
    accs["fedavg"] = _mean([acc(wR, c) for c in clients])
    accs["ditto"] = _mean([acc(ditto.personal[i], c) for i, c in enumerate(clients)])
    accs["apfl"] = _mean([acc(apfl.personalised(i, wR), c) for i, c in enumerate(clients)])

    def ft_acc(w):
        return _mean(
            [
                acc(
                    finetune(
                        model,
                        w,
                        c,
                        steps=cfg.local_model_steps,
                        lr=cfg.lr,
                        batch=cfg.batch,
                        seed=seed * 131 + c.cid,
                    ),
                    c,
                )
                for c in clients
            ]
        )

    ft_curve = {r: ft_acc(run.checkpoints[r]) for r in ft_points}
    accs["fedavg_ft"] = ft_curve[R]

    def potara_at(w, local_states=None, **kw):
        out, lams, infos = [], [], []
        for s, c in zip(locs if local_states is None else local_states, clients, strict=True):
            merged, info = personalise(
                model,
                w,
                s,
                c.X_fisher,
                c.y_fisher,
                damping=cfg.damping,
                client=c.cid,
                config=config,
                fisher_samples=cfg.fisher_samples,
                seed=seed * 1009 + c.cid,
                **{"fisher": cfg.fisher, **kw},
            )
            if kw.get("mode", "factors") == "product":
                out.append(100.0 * accuracy(prod_model, merged, c.X_test, c.y_test))
            else:
                out.append(acc(merged, c))
            lams.append(info.total.weight)
            infos.append(info)
        return _mean(out), out, lams, infos

    prod_model = product_model()
    curve = {}
    for r in curve_rounds:
        curve[r] = potara_at(run.checkpoints[r], mode=cfg.mode)[0]
    accs["potara"], per_client, lams, infos = potara_at(wp, mode=cfg.mode)
    accs["potara_per_module"] = potara_at(wp, mode=cfg.mode, per_module=True)[0]
    accs["potara_no_cross"] = potara_at(wp, mode=cfg.mode, cross=False)[0]
    other = "product" if cfg.mode == "factors" else "factors"
    accs[f"potara_{other}"] = potara_at(wp, mode=other)[0]
    accs["potara_full_rounds"] = potara_at(wR, mode=cfg.mode)[0]
    other_init = "base" if cfg.local_init == "federated" else "fed"
    accs[f"potara_local_from_{other_init}"] = potara_at(
        wp, locs_fed if cfg.local_init == "base" else locs_base, mode=cfg.mode
    )[0]
    accs["potara_identical_as_independent"] = potara_at(wp, mode=cfg.mode, skip_identical=False)[0]

    # held-out cross-entropy of each endpoint on the Fisher samples (diagnostic, and an inferred
    # bias-aware variant: a, b ∝ excess loss ≈ ½ E‖e‖²_H includes the federated adapter's bias)
    def heldout_loss(state, c):
        set_state(model, state)
        with torch.no_grad():
            return float(torch.nn.functional.cross_entropy(model(c.X_fisher), c.y_fisher))

    loss_fed = [heldout_loss(wp, c) for c in clients]
    loss_loc = [heldout_loss(s, c) for s, c in zip(locs, clients, strict=True)]
    lam_loss = [optimal_weight(lf, ll) for lf, ll in zip(loss_fed, loss_loc, strict=True)]
    accs["potara_heldout_loss"] = _mean(
        [
            acc(mix(wp, s, lam), c)
            if cfg.mode == "factors"
            else 100.0 * accuracy(prod_model, merge_lora(wp, s, lam, mode="product")[0], c.X_test, c.y_test)
            for s, c, lam in zip(locs, clients, lam_loss, strict=True)
        ]
    )
    other_fisher = "expected" if cfg.fisher == "empirical" else "empirical"
    accs[f"potara_{other_fisher}_fisher"] = potara_at(wp, mode=cfg.mode, fisher=other_fisher)[0]
    n_all = float(sum(c.n_train for c in clients))
    accs["potara_data_counts"] = _mean(
        [
            acc(
                personalise(
                    model,
                    wp,
                    s,
                    c.X_fisher,
                    c.y_fisher,
                    fisher=cfg.fisher,
                    damping=cfg.damping,
                    n_fed=n_all,
                    n_loc=float(c.n_train),
                    client=c.cid,
                    fisher_samples=cfg.fisher_samples,
                    seed=seed * 1009 + c.cid,
                )[0],
                c,
            )
            for s, c in zip(locs, clients, strict=True)
        ]
    )
    accs["fixed_0.5"] = None  # filled from the grid below
    grid = {}
    for lam in cfg.grid:
        if cfg.mode == "factors":
            grid[lam] = [acc(mix(wp, s, lam), c) for s, c in zip(locs, clients, strict=True)]
        else:
            grid[lam] = [
                100.0 * accuracy(prod_model, merge_lora(wp, s, lam, mode="product")[0], c.X_test, c.y_test)
                for s, c in zip(locs, clients, strict=True)
            ]
    grid_mean = {lam: _mean(v) for lam, v in grid.items()}
    best_lam = max(grid_mean, key=grid_mean.get)
    accs["fixed_0.5"] = grid_mean.get(0.5, float("nan"))
    accs["best_fixed"] = grid_mean[best_lam]
    accs["oracle_per_client"] = _mean([max(grid[lam][i] for lam in cfg.grid) for i in range(len(clients))])
    # the shared-model premise: one adapter trained on the union of the clients' training data, with
    # FedAvg's total number of client steps (rounds × local steps × clients); no federation, no privacy —
    # a diagnostic of whether one shared adapter can serve every client at all, not a baseline
    pooled = train(
        model,
        init,
        torch.cat([c.X_train for c in clients]),
        torch.cat([c.y_train for c in clients]),
        steps=R * cfg.local_steps * len(clients),
        lr=cfg.lr,
        batch=cfg.batch,
        seed=seed * 131 + 7919,
    )
    accs["pooled"] = _mean([acc(pooled, c) for c in clients])
    diagnostics = []
    for i, (c, info) in enumerate(zip(clients, infos, strict=True)):
        t = info.total
        diagnostics.append(
            {
                "client": c.cid,
                "task": c.task,
                "a": t.a,
                "b": t.b,
                "c": t.c,
                "lambda": t.weight,
                "bound": t.bound,
                "loss_fed": loss_fed[i],
                "loss_local": loss_loc[i],
                "lambda_heldout_loss": lam_loss[i],
                "acc_potara": per_client[i],
                "acc_vs_lambda": {lam: grid[lam][i] for lam in cfg.grid},
                "barrier": (
                    accuracy_barrier({lam: grid[lam][i] for lam in cfg.grid})
                    if {0.0, 1.0} <= set(cfg.grid)
                    else float("nan")
                ),
            }
        )
    if cfg.diagnose:
        log(f"  seed {seed} {cfg.skew} per client (a, b, c: summed variance traces; λ on the federated side)")
        log(
            "   cl task        a        b        c     λ*  ℓ_fed ℓ_loc  acc  | acc at λ = "
            + " ".join(f"{lam:g}" for lam in cfg.grid)
        )
        for d in diagnostics:
            log(
                f"  {d['client']:3d} {d['task']:4d} {d['a']:8.3g} {d['b']:8.3g} {d['c']:8.3g}"
                f" {d['lambda']:6.3f} {d['loss_fed']:5.2f} {d['loss_local']:5.2f} {d['acc_potara']:5.1f} | "
                + " ".join(f"{v:.0f}" for v in d["acc_vs_lambda"].values())
            )
    adapter = state_bytes(init)
    res.update(
        accs=accs,
        best_fixed_lambda=best_lam,
        grid=grid_mean,
        potara_lambdas=lams,
        potara_per_client=per_client,
        diagnostics=diagnostics,
        potara_curve=curve,
        ft_curve=ft_curve,
        bytes_at=run.bytes_at,
        adapter_bytes=adapter,
        rounds=R,
        potara_rounds=Rp,
        # the round after which Potara's local adapters exist: trained from the Rp-round federated
        # adapter they cost its Rp rounds of traffic, whatever checkpoint they are merged with
        local_rounds=Rp if cfg.local_init == "federated" else 0,
        seconds={"fedavg+ditto+apfl": t_fed - t0, "total": time.perf_counter() - t0},
        _module_of=None,
    )
    res.pop("_module_of")
    log(
        f"  seed {seed} {cfg.skew}: "
        + ", ".join(f"{k} {v:.1f}" for k, v in accs.items())
        + f" | best λ {best_lam} | {time.perf_counter() - t0:.0f}s"
    )
    return res


def bytes_to_reach(curve: dict[int, float], bytes_at: dict[int, int], target: float) -> float:
    """Bytes at the first checkpoint whose accuracy is ≥ target (inf if never)."""
    for r in sorted(curve):
        if curve[r] >= target - 1e-9:
            return float(bytes_at[r])
    return math.inf


def potara_bytes_at(bytes_at: dict[int, int], local_rounds: int = 0) -> dict[int, int]:
    """What Potara's curve point at round r has cost: ``bytes_at[max(r, local_rounds)]``.

    Local adapters trained from the base cost nothing (``local_rounds = 0``); trained from the federated
    adapter of round Rp (``--local-init federated``) they exist only after Rp rounds of traffic, so a
    merge with an earlier checkpoint is charged those Rp rounds too."""
    last = max(bytes_at)
    return {r: bytes_at[min(max(r, local_rounds), last)] for r in bytes_at}


def summarise(runs: list[dict]) -> dict:
    """Means over seeds, the communication comparison, and the targets of the issue."""
    methods = list(runs[0]["accs"])
    mean = {m: _mean([r["accs"][m] for r in runs]) for m in methods}
    std = {m: float(np.std([r["accs"][m] for r in runs])) for m in methods}
    bytes_at = runs[0]["bytes_at"]  # identical across seeds (full participation, same adapter)
    po_bytes_at = potara_bytes_at(bytes_at, runs[0].get("local_rounds", 0))
    pc = {r: _mean([x["potara_curve"][r] for x in runs]) for r in runs[0]["potara_curve"]}
    fc = {r: _mean([x["ft_curve"][r] for x in runs]) for r in runs[0]["ft_curve"]}
    ft_final = fc[max(fc)]
    ft_bytes = bytes_to_reach(fc, bytes_at, ft_final)
    po_bytes = bytes_to_reach(pc, po_bytes_at, ft_final)
    per_seed_ratio = []
    for x in runs:
        f = x["ft_curve"]
        fb = bytes_to_reach(f, bytes_at, f[max(f)])
        per_seed_ratio.append(bytes_to_reach(x["potara_curve"], po_bytes_at, f[max(f)]) / fb)
    return {
        "mean": mean,
        "std": std,
        "seeds": [r["seed"] for r in runs],
        "potara_curve": pc,
        "ft_curve": fc,
        "ft_final": ft_final,
        "ft_bytes_to_final": ft_bytes,
        "potara_bytes_to_ft_final": po_bytes,
        "bytes_ratio": po_bytes / ft_bytes,
        "bytes_ratio_per_seed": per_seed_ratio,
        "bytes_at": bytes_at,
        "potara_bytes_at": po_bytes_at,
        "adapter_bytes": runs[0]["adapter_bytes"],
        "mean_lambda": _mean([_mean(r["potara_lambdas"]) for r in runs]),
    }


def targets(summary: dict, skew: str) -> list[dict]:
    m = summary["mean"]
    tag = skew.replace(":", "")
    return [
        {
            "name": f"potara-vs-best-fixed-{tag}",
            "metric": "mean personalised accuracy (%), Potara − best fixed λ",
            "candidate": m["potara"],
            "baseline": m["best_fixed"],
            "value": m["potara"] - m["best_fixed"],
            "bound": -0.5,
            "better": "higher",
            "met": m["potara"] >= m["best_fixed"] - 0.5,
        },
        {
            "name": f"potara-vs-fedavg-ft-{tag}",
            "metric": "mean personalised accuracy (%), Potara − FedAvg+FT",
            "candidate": m["potara"],
            "baseline": m["fedavg_ft"],
            "value": m["potara"] - m["fedavg_ft"],
            "bound": 0.0,
            "better": "higher",
            "met": m["potara"] >= m["fedavg_ft"],
        },
        {
            "name": f"bytes-to-ft-final-{tag}",
            "metric": "bytes to reach FedAvg+FT's final accuracy, Potara / FedAvg+FT",
            "candidate": summary["potara_bytes_to_ft_final"],
            "baseline": summary["ft_bytes_to_final"],
            "value": summary["bytes_ratio"],
            "bound": 0.5,
            "better": "lower",
            "met": bool(summary["bytes_ratio"] <= 0.5),
        },
    ]


def experiment(cfg: SimConfig, seeds: list[int], *, log=print) -> dict:
    cfg.validate()
    runs = [run_seed(cfg, s, log=log) for s in seeds]
    summ = summarise(runs)
    return {"config": asdict(cfg), "runs": runs, "summary": summ, "targets": targets(summ, cfg.skew)}


def json_safe(obj):
    """Replace inf/nan (e.g. "never reached" byte counts) by None so the result is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


METHOD_ORDER = (
    "local",
    "fedavg",
    "fedavg_ft",
    "pooled",
    "ditto",
    "apfl",
    "fixed_0.5",
    "best_fixed",
    "oracle_per_client",
    "potara",
    "potara_per_module",
    "potara_no_cross",
    "potara_product",
    "potara_factors",
    "potara_full_rounds",
    "local_from_fed",
    "potara_local_from_fed",
    "potara_local_from_base",
    "potara_identical_as_independent",
    "potara_heldout_loss",
    "potara_data_counts",
    "potara_expected_fisher",
    "potara_empirical_fisher",
)


def diagnosis_lines(result: dict) -> list[str]:
    """Per-client diagnostics averaged over clients and seeds, split by task (task 0 = the public task)."""
    ds = [d for r in result["runs"] for d in r.get("diagnostics", [])]
    groups = {"task 0": [d for d in ds if d["task"] == 0], "tasks != 0": [d for d in ds if d["task"] != 0]}
    lines = [
        "diagnosis (means over clients x seeds): λ* [min, max], a/b, c/min(a,b), held-out CE of the "
        "federated / local endpoint, λ from held-out CE, accuracy at λ = 0 / 0.5 / 1, accuracy barrier "
        "along the merge path (points below the chord; 0 = linearly connected)"
    ]
    for name, g in groups.items():
        if not g:
            continue
        lam = [d["lambda"] for d in g]
        acc = {k: _mean([d["acc_vs_lambda"][k] for d in g]) for k in (0.0, 0.5, 1.0)}
        lines.append(
            f"  {name:>10} ({len(g):2d}): λ* {_mean(lam):.3f} [{min(lam):.2f}, {max(lam):.2f}], "
            f"a/b {_mean([d['a'] / d['b'] for d in g]):.2f}, "
            f"c/min {_mean([d['c'] / min(d['a'], d['b']) for d in g]):.3f}, "
            f"CE fed {_mean([d['loss_fed'] for d in g]):.2f} "
            f"/ local {_mean([d['loss_local'] for d in g]):.2f}, "
            f"λ_CE {_mean([d['lambda_heldout_loss'] for d in g]):.3f}, "
            f"acc {acc[0.0]:.1f} / {acc[0.5]:.1f} / {acc[1.0]:.1f}, "
            f"barrier {_mean([d.get('barrier', float('nan')) for d in g]):.1f}"
        )
    return lines


def table(result: dict) -> str:
    s = result["summary"]
    cfg = result["config"]
    lines = [
        f"skew {cfg['skew']}, {cfg['n_clients']} clients, {cfg['rounds']} rounds "
        f"(Potara {math.ceil(cfg['potara_frac'] * cfg['rounds'])}), "
        f"seeds {s['seeds']}, adapter {s['adapter_bytes']} B",
        f"{'method':>32}  {'acc %':>6}  {'± sd':>5}",
    ]
    for m in METHOD_ORDER:
        if m in s["mean"]:
            lines.append(f"{m:>32}  {s['mean'][m]:6.2f}  {s['std'][m]:5.2f}")
    lines.append(f"mean Potara λ (federated weight): {s['mean_lambda']:.3f}")
    if cfg.get("diagnose"):
        lines.extend(diagnosis_lines(result))
    lines.append(
        f"bytes to reach FedAvg+FT final ({s['ft_final']:.2f}%): "
        f"Potara {s['potara_bytes_to_ft_final']:.4g} vs "
        f"FedAvg+FT {s['ft_bytes_to_final']:.4g} (ratio {s['bytes_ratio']:.3f})"
    )
    return "\n".join(lines)


def plot(results: list[dict], path) -> bool:
    """Accuracy vs bytes: Potara's curve and FedAvg+FT's, one panel per skew."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
    for ax, res in zip(axes[0], results, strict=True):
        s = res["summary"]
        b = s["bytes_at"]
        pc, fc = s["potara_curve"], s["ft_curve"]
        pb = s.get("potara_bytes_at", b)
        ax.plot([pb[r] / 1e6 for r in sorted(pc)], [pc[r] for r in sorted(pc)], "o-", label="Potara")
        ax.plot([b[r] / 1e6 for r in sorted(fc)], [fc[r] for r in sorted(fc)], "s--", label="FedAvg + FT")
        ax.axhline(s["mean"]["best_fixed"], color="grey", lw=0.8, label="best fixed λ (Potara rounds)")
        ax.set_title(res["config"]["skew"])
        ax.set_xlabel("MB sent (up + down)")
        ax.set_ylabel("mean personalised accuracy (%)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    from papershelf.repro import atomic_path

    with atomic_path(path, mode="wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)
    return True
