"""The headline experiments at small scale: class-incremental runs, the G sweep, timing, bench, demo."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from circle_cil import __version__
from circle_cil.baselines import FrozenCNN, JointCNN, LwF, RandomConvSLDA
from circle_cil.circle import CIRCLE
from circle_cil.data import Dataset, class_incremental_stream, load_dataset
from papershelf.bench import record
from papershelf.errors import InputError
from papershelf.progress import progress

METHODS = ("CIRCLE", "LwF", "frozen", "random-conv", "joint")


@dataclass
class Budget:
    """Training budget of the trained-backbone baselines.

    LwF trains every task until its loss plateaus: at most ``lwf_epochs`` epochs, stopping when the
    mean epoch loss (cross-entropy + distillation) has not improved by more than ``lwf_tol`` nats for
    ``lwf_patience`` epochs (``lwf_patience=None``: exactly ``lwf_epochs`` epochs)."""

    lwf_epochs: int = 100
    lwf_patience: int | None = 3
    lwf_tol: float = 0.01
    frozen_epochs: int = 20
    joint_epochs: int = 10
    batch: int = 32
    inc_per_class: int = 5  # test images per class for the intermediate (A_inc) evaluations


def circle_config(**overrides: Any) -> dict[str, Any]:
    """The default CIRCLE configuration for a dataset's image size (patch 4 for 32×32, 2 for 8×8)."""
    cfg: dict[str, Any] = dict(n_reservoirs=8, n_groups=4, units=128)
    cfg.update(overrides)
    return cfg


def _subsample(X, y, per_class: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    keep = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:per_class] for c in np.unique(y)])
    keep.sort()
    return X[keep], y[keep]


def _warm_up(data: Dataset) -> None:
    """One untimed throwaway CNN step and reservoir pass, so first-call library set-up (kernel
    selection, allocator growth) is not charged to whichever method happens to run first."""
    from circle_cil.baselines import SmallCNN

    x = torch.as_tensor(data.X_train[:8])
    net = SmallCNN(x.shape[1])
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(x).sum().backward()
    opt.step()  # the optimiser's first step imports and sets up its machinery
    c = CIRCLE(n_reservoirs=1, n_groups=1, units=16, patch=2 if x.shape[-1] % 4 else 4)
    c.partial_fit(data.X_train[:8], data.y_train[:8])


def make_learner(method: str, data: Dataset, *, seed: int, budget: Budget, circle_kw: dict[str, Any]):
    c = data.image_shape[0]
    k = data.n_classes
    if method == "CIRCLE":
        patch = 4 if data.image_shape[1] % 4 == 0 and data.image_shape[1] >= 16 else 2
        return CIRCLE(**{"patch": patch, "seed": seed, **circle_kw})
    if method == "LwF":
        return LwF(
            c,
            k,
            epochs=budget.lwf_epochs,
            patience=budget.lwf_patience,
            tol=budget.lwf_tol,
            batch=budget.batch,
            seed=seed,
        )
    if method == "frozen":
        return FrozenCNN(c, k, epochs=budget.frozen_epochs, batch=budget.batch, seed=seed)
    if method == "random-conv":
        return RandomConvSLDA(c, seed=seed)
    if method == "joint":
        return JointCNN(c, k, epochs=budget.joint_epochs, batch=2 * budget.batch, seed=seed)
    raise InputError(f"method must be one of {', '.join(METHODS)}; got {method!r}")


def run_stream(
    data: Dataset,
    n_tasks: int,
    method: str = "CIRCLE",
    *,
    seed: int = 0,
    order_seed: int = 1993,
    budget: Budget | None = None,
    circle_kw: dict[str, Any] | None = None,
    quiet: bool = True,
    final_only: bool = False,
) -> dict[str, Any]:
    """Run one method over a class-incremental stream; return accuracies per task and the train time.

    ``final_acc`` is the accuracy on the whole test set of all classes after the last task;
    ``avg_inc_acc`` is the mean over tasks of the accuracy on the seen classes (intermediate
    evaluations use ``budget.inc_per_class`` test images per class, the last one all of them).
    A task after which no test image of a seen class exists is not evaluated.
    ``final_only`` skips the intermediate evaluations (``avg_inc_acc`` is then None).
    ``joint`` trains once on everything (no stream): it reports only ``final_acc``.
    """
    budget = budget or Budget()
    circle_kw = circle_config(**(circle_kw or {}))
    unseen = np.setdiff1d(data.y_test, data.y_train)
    if unseen.size:
        raise InputError(
            f"y_test contains class(es) {unseen.tolist()} that are not in y_train; a class-incremental "
            "model can only be scored on classes it has learned"
        )
    torch.manual_seed(seed)
    learner = make_learner(method, data, seed=seed, budget=budget, circle_kw=circle_kw)
    if method == "joint":
        _warm_up(data)
        c0 = time.process_time()
        learner.learn_task(data.X_train, data.y_train)
        cpu = time.process_time() - c0
        acc = float(np.mean(learner.predict(data.X_test) == data.y_test))
        return dict(
            method=method,
            n_tasks=n_tasks,
            final_acc=acc,
            avg_inc_acc=None,
            accs=[acc],
            train_seconds=learner.train_seconds,
            train_cpu_seconds=cpu,
        )
    tasks = class_incremental_stream(data, n_tasks, seed=order_seed)
    _warm_up(data)
    Xs, ys = _subsample(data.X_test, data.y_test, budget.inc_per_class)
    seen: list[int] = []
    accs = []
    test_feats = None
    if method == "CIRCLE":  # fixed extractor: test features once (not counted as training)
        test_feats = (None if final_only else learner.features(Xs)), learner.features(data.X_test)
    t_train = c_train = 0.0
    for task in progress(tasks, desc=f"{method} {n_tasks} tasks", quiet=quiet):
        t0, c0 = time.perf_counter(), time.process_time()
        if method == "CIRCLE":
            learner.partial_fit(task.X_train, task.y_train)
        else:
            learner.learn_task(task.X_train, task.y_train)
        t_train += time.perf_counter() - t0
        c_train += time.process_time() - c0
        seen += task.classes
        last = task.index == len(tasks) - 1
        if final_only and not last:
            continue
        X_ev, y_ev = (data.X_test, data.y_test) if last else (Xs, ys)
        mask = np.isin(y_ev, seen)
        if not mask.any():  # no test image of the classes seen so far: nothing to evaluate yet
            if last:
                raise InputError("the test set is empty: nothing to score")
            continue
        if method == "CIRCLE":
            f = test_feats[1] if last else test_feats[0]
            proba = learner.proba_from_features(f[torch.from_numpy(mask)])
            pred = np.asarray(learner.classes_)[proba.argmax(1).numpy()]
        else:
            pred = learner.predict(X_ev[mask])
        accs.append(float(np.mean(pred == y_ev[mask])))
    return dict(
        method=method,
        n_tasks=n_tasks,
        final_acc=accs[-1],
        avg_inc_acc=None if final_only else float(np.mean(accs)),
        accs=accs,
        train_seconds=t_train,
        train_cpu_seconds=c_train,
        epochs_per_task=list(getattr(learner, "epochs_run", [])) or None,
    )


def streaming_rate(data: Dataset, *, n: int = 2000, seed: int = 0, circle_kw: dict | None = None) -> dict:
    """Samples per second of CIRCLE ``partial_fit`` (features + head updates), one sample per call and
    in chunks of 64 (the same sequential updates), on the first ``n`` training images."""
    X, y = data.X_train[:n], data.y_train[:n]
    kw = circle_config(**(circle_kw or {}))
    patch = 4 if data.image_shape[1] % 4 == 0 and data.image_shape[1] >= 16 else 2
    out = {}
    for label, step in (("per_sample", 1), ("chunk64", 64)):
        m = CIRCLE(patch=patch, seed=seed, **kw)
        m.partial_fit(X[:1], y[:1])  # build + warm up
        count = min(n, 300) if step == 1 else n
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(1, count, step):
            if step == 1:
                m.partial_fit(X[i], y[i])
            else:
                m.partial_fit(X[i : i + step], y[i : i + step])
        out[label] = (count - 1) / (time.perf_counter() - t0)
        out[label + "_cpu"] = (count - 1) / (time.process_time() - c0)
    return out


def g_sweep(
    data: Dataset, n_tasks: int, *, M: int = 8, groups=(1, 2, 4, 8), seeds=(0, 1, 2), circle_kw=None
) -> list[dict[str, Any]]:
    """Bias–variance sweep: final accuracy of CIRCLE over G for fixed M, mean ± sd over seeds."""
    rows = []
    for G in groups:
        accs = [
            run_stream(
                data,
                n_tasks,
                "CIRCLE",
                seed=s,
                final_only=True,
                circle_kw={**(circle_kw or {}), "n_reservoirs": M, "n_groups": G},
            )["final_acc"]
            for s in seeds
        ]
        rows.append(dict(M=M, G=G, mean=float(np.mean(accs)), sd=float(np.std(accs)), accs=accs))
    return rows


def compare_methods(data, splits, methods, *, seed=0, budget=None, quiet=True, circle_kw=None):
    rows = []
    for n_tasks in splits:
        for method in methods:
            if method == "joint" and n_tasks != splits[0]:
                continue
            r = run_stream(data, n_tasks, method, seed=seed, budget=budget, quiet=quiet, circle_kw=circle_kw)
            rows.append(r)
            if not quiet:
                inc = "—" if r["avg_inc_acc"] is None else f"{r['avg_inc_acc']:.4f}"
                print(
                    f"  {method:12s} tasks={n_tasks:3d} final={r['final_acc']:.4f} inc={inc} "
                    f"train={r['train_seconds']:.1f}s wall, {r['train_cpu_seconds']:.1f}s CPU",
                    flush=True,
                )
    return rows


# ---- reproduce ----------------------------------------------------------------------------------------
def reproduce(*, quick: bool = False, seed: int = 0, quiet: bool = False) -> dict[str, Any]:
    """Final / average incremental accuracy vs number of tasks for CIRCLE and the baselines on GlyphCIL
    (and digits), the G sweep at fixed M, and training times."""
    torch.set_num_threads(1)
    if quick:
        glyph = load_dataset("glyph", n_classes=20, per_class=12, seed=seed)
        splits, budget = [5, 10, 20], Budget(lwf_epochs=1, frozen_epochs=2, joint_epochs=2)
        sweep_kw = dict(M=4, groups=(1, 2, 4), seeds=(0, 1))
        ckw: dict[str, Any] = dict(n_reservoirs=4, n_groups=2, units=32)
        digit_splits = [2, 5]
    else:
        glyph = load_dataset("glyph", n_classes=200, per_class=24, seed=seed)
        splits, budget = [10, 20, 50, 100], Budget()
        sweep_kw = dict(M=8, groups=(1, 2, 4, 8), seeds=(0, 1))
        ckw = {}
        digit_splits = [5, 10]
    if not quiet:
        print(glyph.describe(), flush=True)
    rows = compare_methods(glyph, splits, METHODS, seed=seed, budget=budget, quiet=quiet, circle_kw=ckw)
    digits = load_dataset("digits", seed=seed)
    if not quiet:
        print(digits.describe(), flush=True)
    drows = compare_methods(
        digits,
        digit_splits,
        ("CIRCLE", "LwF", "frozen", "random-conv"),
        seed=seed,
        budget=Budget(lwf_epochs=budget.lwf_epochs, frozen_epochs=budget.frozen_epochs, inc_per_class=10**6),
        quiet=quiet,
        circle_kw={**ckw, "units": 32},
    )
    if not quiet:
        print(f"G sweep (fixed M) at {splits[2 if len(splits) > 2 else -1]} tasks", flush=True)
    sweep_tasks = splits[2 if len(splits) > 2 else -1]
    sweep = g_sweep(glyph, sweep_tasks, circle_kw=ckw, **sweep_kw)
    return dict(
        settings=dict(
            dataset=glyph.describe(),
            splits=splits,
            budget=budget.__dict__,
            circle=circle_config(**ckw),
            digits=digits.describe(),
            digit_splits=digit_splits,
            sweep_tasks=sweep_tasks,
            seed=seed,
            order_seed=1993,
        ),
        glyph=rows,
        digits=drows,
        g_sweep=sweep,
    )


# ---- bench --------------------------------------------------------------------------------------------
def bench(
    *, quick: bool = False, seed: int = 0, quiet: bool = False, splits=None, rate: bool = True
) -> list[dict[str, Any]]:
    """The issue's targets in one run: CIRCLE vs LwF and frozen at 50 and 100 tasks (accuracy and
    train-time ratio), and the streaming rate."""
    torch.set_num_threads(1)
    if quick:
        data = load_dataset("glyph", n_classes=20, per_class=10, seed=seed)
        splits, budget = splits or [10, 20], Budget(lwf_epochs=2, frozen_epochs=1)
        ckw: dict[str, Any] = dict(n_reservoirs=2, n_groups=2, units=16)
        n_rate = 100
    else:
        data = load_dataset("glyph", n_classes=200, per_class=24, seed=seed)
        splits, budget = splits or [50, 100], Budget()
        ckw = {}
        n_rate = 2000
    recs = []
    base = dict(package="circle-cil", version=__version__)
    for n_tasks in splits:
        res = {
            m: run_stream(data, n_tasks, m, seed=seed, budget=budget, circle_kw=ckw, quiet=quiet)
            for m in ("CIRCLE", "LwF", "frozen")
        }
        setting = dict(
            dataset=data.describe(), n_tasks=n_tasks, circle=circle_config(**ckw), budget=budget.__dict__
        )
        c = res["CIRCLE"]
        for other, margin in (("LwF", 0.10), ("frozen", 0.05)):
            o = res[other]
            recs.append(
                record(
                    **base,
                    benchmark=f"final-acc-{n_tasks}-tasks-vs-{other}",
                    setting=setting,
                    metric="final accuracy (candidate - baseline in points via ratio)",
                    better="higher",
                    candidate="CIRCLE",
                    candidate_value=c["final_acc"],
                    baseline=other,
                    baseline_value=o["final_acc"],
                    repeats=1,
                    target=None,
                    margin_points=100 * (c["final_acc"] - o["final_acc"]),
                    margin_target_points=100 * margin,
                    margin_met=bool(c["final_acc"] - o["final_acc"] >= margin),
                    candidate_avg_inc=c["avg_inc_acc"],
                    baseline_avg_inc=o["avg_inc_acc"],
                )
            )
        recs.append(
            record(
                **base,
                benchmark=f"train-time-{n_tasks}-tasks-LwF-over-CIRCLE",
                setting=setting,
                metric="training CPU seconds, 1 thread (ratio = LwF / CIRCLE)",
                better="higher",
                candidate="LwF",
                candidate_value=res["LwF"]["train_cpu_seconds"],
                baseline="CIRCLE",
                baseline_value=c["train_cpu_seconds"],
                candidate_wall_seconds=res["LwF"]["train_seconds"],
                baseline_wall_seconds=c["train_seconds"],
                repeats=1,
                target=10.0,
                lwf_final_acc=res["LwF"]["final_acc"],
                lwf_epochs_per_task=res["LwF"]["epochs_per_task"],
                frozen_cpu_seconds=res["frozen"]["train_cpu_seconds"],
            )
        )
    if not rate:
        return recs
    rate = streaming_rate(data, n=n_rate, seed=seed, circle_kw=ckw)
    recs.append(
        record(
            **base,
            benchmark="streaming-partial-fit-rate",
            setting=dict(dataset=data.describe(), circle=circle_config(**ckw), samples=n_rate),
            metric="samples per CPU second, 1 thread (candidate: chunks of 64; baseline: one per call)",
            better="higher",
            candidate="partial_fit(64 rows)",
            candidate_value=rate["chunk64_cpu"],
            baseline="partial_fit(1 row)",
            baseline_value=rate["per_sample_cpu"],
            candidate_wall_rate=rate["chunk64"],
            baseline_wall_rate=rate["per_sample"],
            repeats=1,
            target=None,
            per_sample_target=1000.0,
            per_sample_met=bool(rate["per_sample_cpu"] >= 1000.0),
            chunk_met=bool(rate["chunk64_cpu"] >= 1000.0),
        )
    )
    return recs
