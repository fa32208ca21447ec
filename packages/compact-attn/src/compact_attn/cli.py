"""The ``compact-attn`` command line: ``demo``, ``bench``, ``reproduce`` and ``eval --model PATH``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from compact_attn import __version__
from papershelf.cli import App, arg, check_threads, read_text
from papershelf.errors import InputError, MissingDependencyError, check_choice, check_int, check_number
from papershelf.hf_folder import check_config_fits_weights, model_folder
from papershelf.repro import check_output_path

app = App(
    "compact-attn",
    __version__,
    "CompactAttention (block-union KV selection for chunked prefill) and its baselines.",
)

SEL_ARGS = [
    arg(
        "--budget",
        type=float,
        default=0.25,
        help="fraction of the past KV cache kept (default 0.25; in reproduce, for task accuracy)",
    ),
    arg("--block", type=int, default=64, help="page / KV-block size in tokens (default 64)"),
    arg("--stride", type=int, default=8, help="antidiagonal stride (default 8)"),
    arg("--chunk", type=int, default=512, help="prefill chunk in tokens (default 512)"),
    arg("--rule", default="max", help="budget ranking: max (block probability) or mass (cumulative mass)"),
    arg("--sink", type=int, default=0, help="leading KV blocks always kept, inside the budget (default 0)"),
    arg(
        "--pool",
        default="mean",
        help="antidiagonal rows → Q-block: mean (default) or max (the bound selector: max)",
    ),
    arg("--alloc", default="head", help="budget per KV head (head, default) or pooled over KV heads"),
    arg("--queries", type=int, default=8, help="tail selector: exact queries per Q-block (default 8)"),
]


def _sel_kw(args, selector: str = "antidiagonal") -> dict:
    """Selector keywords from the CLI (validated by the selector)."""
    kw = {"rule": args.rule, "sink": args.sink, "alloc": args.alloc}
    if selector == "antidiagonal":
        kw.update(stride=args.stride, pool=args.pool)
    elif selector == "tail":
        kw.update(queries=args.queries)
    return kw


def _threads(n: int) -> None:
    import torch

    torch.set_num_threads(check_threads(n))


def _check_sel(args) -> None:
    check_number("--budget", args.budget, low=0, high=1, low_open=True)
    check_int("--block", args.block, low=1)
    check_int("--stride", args.stride, low=1)
    check_int("--chunk", args.chunk, low=1)
    if args.rule not in ("max", "mass"):
        raise InputError(f"--rule must be 'max' or 'mass', got {args.rule!r}")
    if args.pool not in ("mean", "max"):
        raise InputError(f"--pool must be 'mean' or 'max', got {args.pool!r}")
    if args.alloc not in ("head", "pooled"):
        raise InputError(f"--alloc must be 'head' or 'pooled', got {args.alloc!r}")
    check_int("--sink", args.sink, low=0)
    check_int("--queries", args.queries, low=1)
    selector = getattr(args, "selector", None)  # bench and reproduce run every selector
    if selector in (None, "antidiagonal") and args.block % args.stride:  # only this one has a stride
        raise InputError(f"--block ({args.block}) must be a multiple of --stride ({args.stride})")
    if selector in (None, "tail") and args.queries > args.block:
        raise InputError(f"--queries ({args.queries}) must be at most --block ({args.block})")


def _table(header: list[str], rows: list[list]) -> str:
    def fmt(x):
        return f"{x:.4f}" if isinstance(x, float) else str(x)

    cells = [header] + [[fmt(x) for x in r] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = ["  ".join(c[i].rjust(widths[i]) for i in range(len(header))) for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


METHOD_ORDER = (
    "compact-antidiag",
    "compact-meanpool",
    "compact-bound",
    "compact-tail",
    "quoka",
    "per-head-antidiag",
)


# ---- demo ---------------------------------------------------------------------------------------------
@app.command(
    "demo",
    help="a synthetic chunk with planted query-specific blocks: recall / error / KV read per method",
    args=[arg("--n", type=int, default=4096, help="context length (default 4096)")],
    common=("seed",),
)
def _demo(args: argparse.Namespace) -> None:
    n = check_int("--n", args.n, low=1024, high=1 << 15)
    import torch

    from compact_attn.data import planted_chunk
    from compact_attn.experiments import methods_for, recall_and_error

    torch.set_num_threads(1)
    chunk, block = 256, 16
    q, k, v, truth = planted_chunk(n, chunk, block=block, needles=4, strength=12.0, seed=args.seed)
    print(
        f"one chunk of {chunk} queries at n = {n}; 8 query / 2 KV heads, d 32, blocks of {block}, budget 10%"
    )
    print("each query head has 4 planted past blocks that a random quarter of its queries attend to\n")
    methods = methods_for(0.1, block=block, stride=4, n_queries=16)
    res = recall_and_error(q, k, v, methods, block=block)
    rows = []
    for name in METHOD_ORDER:
        m, r = methods[name], res[name]
        if name.startswith("compact"):
            t = m.last_tables.as_lists()
            hit = [len(set(truth[h]) & set(t[h // 4])) / len(truth[h]) for h in range(8)]
        elif name == "quoka":
            idx = m.last_index
            hit = [
                len(set(truth[h]) & set((idx[h // 4] // block).tolist())) / len(truth[h]) for h in range(8)
            ]
        else:  # per-head: a head keeps a block if any of its Q-block rows reads it
            kept = [set(torch.cat(m.last_rows[h]).tolist()) for h in range(8)]
            hit = [len(set(truth[h]) & kept[h]) / len(truth[h]) for h in range(8)]
        rows.append([name, r["recall"], r["rel_error"], r["kv_fraction"], sum(hit) / len(hit)])
    rows.append(["dense", 1.0, 0.0, 1.0, 1.0])
    print(_table(["method", "attn-mass recall", "out rel err", "KV fraction", "needle blocks kept"], rows))


# ---- bench --------------------------------------------------------------------------------------------
@app.command(
    "bench",
    help="CPU time of one chunk (512 q at 32K, 32/8 heads, d 128): dense vs CompactAttention, one run; "
    "--accuracy adds testbed recall/error vs QUOKA",
    args=[
        arg("--n", type=int, default=32768, help="accumulated context (default 32768)"),
        arg("--threads", type=int, default=1, help="torch CPU threads (default 1)"),
        arg("--repeat", type=int, default=3, help="interleaved timed rounds after one warm-up (default 3)"),
        arg("--no-per-head", action="store_true", help="skip the (slow) per-head block-sparse baseline"),
        arg("--accuracy", action="store_true", help="also recall/error on tiny-m attention at 8K and 16K"),
        arg("--quick", action="store_true", help="tiny sizes in seconds, to prove the path works"),
        *SEL_ARGS,
    ],
    common=("out",),
)
def _bench(args: argparse.Namespace) -> None:
    from compact_attn.experiments import speed_chunk
    from papershelf.bench import record, write_records

    _check_sel(args)
    _threads(args.threads)
    check_output_path(args.out)
    repeat = check_int("--repeat", args.repeat, low=1)
    if args.quick:
        fixed = {"--n": args.n != 32768, "--chunk": args.chunk != 512, "--block": args.block != 64,
                 "--repeat": args.repeat != 3, "--accuracy": args.accuracy}  # fmt: skip
        given = [flag for flag, changed in fixed.items() if changed]
        if given:  # --quick runs fixed tiny sizes; a silently ignored flag would mislabel the record
            raise InputError(f"--quick runs fixed tiny sizes and does not take {', '.join(given)}")
        shape = dict(n=2048, chunk=128, heads=8, kv_heads=2, head_dim=64, block=32)
        repeat = 1
    else:
        n = check_int("--n", args.n, low=args.chunk + 1, high=1 << 18)
        shape = dict(n=n, chunk=args.chunk, heads=32, kv_heads=8, head_dim=128, block=args.block)
    r = speed_chunk(
        **shape,
        budget=args.budget,
        stride=args.stride,
        repeat=repeat,
        per_head=not args.no_per_head,
        alloc=args.alloc,
        rule=args.rule,
        sink=args.sink,
        pool=args.pool,
        queries=args.queries,
    )
    med = r["median_s"]
    print(
        f"one chunk of {r['chunk']} queries at n = {r['n']}, {r['heads']} q / {r['kv_heads']} KV heads, "
        f"d {r['head_dim']}, block {r['block']}, budget {args.budget:g}; {repeat} rounds, medians"
    )
    rows = [[m, med[m] * 1e3, r["kv_fraction"][m], r["speedup"][m]] for m in med]
    print(_table(["method", "median ms", "KV fraction", f"speedup vs {r['dense']}"], rows))
    keys = "n chunk heads kv_heads head_dim block budget stride alloc rule sink pool queries".split()
    setting = {k: r[k] for k in keys}  # what the timed selectors were built with
    setting["threads"] = args.threads
    records = []
    target = None if args.quick else 0.5
    for m in med:
        if m.startswith("dense"):
            continue
        records.append(
            record(
                package="compact-attn", version=__version__,
                benchmark=f"chunk-attention-time-{r['n']}-{m}" + ("-quick" if args.quick else ""),
                setting=setting, metric="attention time of one chunk incl. selection (s)", better="lower",
                candidate=m, candidate_value=med[m], baseline=r["dense"], baseline_value=r["dense_s"],
                repeats=repeat, target=target if m.startswith("compact") else None,
                kv_fraction=r["kv_fraction"][m], all_medians_s=med,
            )
        )  # fmt: skip
    for rec in records:
        if rec["target"] is not None:
            print(f"{rec['candidate']}: speedup {1 / rec['ratio']:.2f}x vs {rec['baseline']}, target >= 2x: "
                  f"{'met' if rec['met'] else 'MISSED'}")  # fmt: skip
    if args.accuracy and not args.quick:
        records += _accuracy_records(args)
    if args.out:
        write_records(args.out, records)
        print(f"wrote {args.out}")


def _accuracy_records(args) -> list[dict]:
    from compact_attn.experiments import need_testbed, testbed_curves
    from papershelf.bench import record

    lm = need_testbed()
    model, _ = lm.load("tiny-m")
    out = []
    for n in (8192, 16384):
        c = testbed_curves(model, n, [args.budget], chunk=args.chunk, block=args.block, stride=args.stride,
                           rule=args.rule, sink=args.sink, pool=args.pool, alloc=args.alloc,
                           queries=args.queries)  # fmt: skip
        row = c["rows"][0]
        setting = {"model": "tiny-m", "n": n, "chunk": args.chunk, "block": args.block, "budget": args.budget,
                   "layers": c["layers"], "chunks_scored_per_layer": c["chunks_per_sample"],
                   "stride": args.stride, "alloc": args.alloc, "rule": args.rule, "sink": args.sink,
                   "pool": args.pool, "queries": args.queries}  # fmt: skip
        for m in ("compact-antidiag", "compact-meanpool", "compact-bound", "compact-tail"):
            for metric, better, target in (("recall", "higher", 1.05), ("rel_error", "lower", 0.7)):
                rec = record(
                    package="compact-attn", version=__version__, benchmark=f"testbed-{metric}-{n}-{m}",
                    setting=setting, metric=f"attention-mass {metric}" if metric == "recall"
                    else "relative error of the attention output", better=better, candidate=m,
                    candidate_value=row[m][metric], baseline="quoka", baseline_value=row["quoka"][metric],
                    repeats=1, target=target, per_head_value=row["per-head-antidiag"][metric],
                    kv_fraction={k: row[k]["kv_fraction"] for k in METHOD_ORDER},
                )  # fmt: skip
                out.append(rec)
                cv, bv, op = (
                    rec["candidate_value"],
                    rec["baseline_value"],
                    ">=" if better == "higher" else "<=",
                )
                verdict = "met" if rec["met"] else "MISSED"
                print(f"n={n} {m} {metric}: {cv:.4f} vs quoka {bv:.4f} (ratio {rec['ratio']:.3f}, ")
                print(f"    target {op} {target}: {verdict})")
    return out


# ---- reproduce ----------------------------------------------------------------------------------------
@app.command(
    "reproduce",
    help="recall/error vs KV budget on testbed attention, and RULER-like accuracy under chunked prefill",
    args=[
        arg("--model", default="tiny-m", help="testbed checkpoint for recall/error (default tiny-m)"),
        arg("--task-model", default="tiny-s", help="testbed checkpoint for task accuracy (default tiny-s)"),
        arg(
            "--task-yarn",
            type=float,
            default=None,
            metavar="F",
            help="stretch the task model's RoPE to F x its trained context with YaRN (no training)",
        ),
        arg(
            "--lengths",
            type=int,
            nargs="*",
            default=[8192, 16384],
            help="contexts for recall/error (none: task accuracy only)",
        ),
        arg(
            "--budgets",
            type=float,
            nargs="+",
            default=[0.0625, 0.125, 0.25, 0.5],
            help="KV budgets of the recall/error curves (task accuracy uses --budget)",
        ),
        arg("--task-lengths", type=int, nargs="+", default=[1024, 2048, 4096]),
        arg("--tasks", nargs="+", default=["passkey", "niah", "vartrack"]),
        arg("--samples", type=int, default=10, help="task samples per cell (default 10)"),
        arg(
            "--task-protocol",
            default="prefill",
            help="prefill: the answer is prefilled with the prompt (default); decode-dense: the prompt is "
            "chunk-prefilled with the method, the answer decoded with dense attention (a serving engine); "
            "decode-method: the decode steps through the method too",
        ),
        arg("--chunks", type=int, default=1, help="last chunks scored per layer for recall (default 1)"),
        arg("--threads", type=int, default=1),
        arg("--plot", default=None, metavar="FILE.png", help="recall / error curves (needs matplotlib)"),
        *SEL_ARGS,
    ],
    common=("out",),
)
def _reproduce(args: argparse.Namespace) -> None:
    from compact_attn.experiments import TASK_PROTOCOLS, need_testbed, task_accuracy, testbed_curves

    check_choice("--task-protocol", args.task_protocol, TASK_PROTOCOLS)
    lm = need_testbed()
    _check_sel(args)
    _threads(args.threads)
    check_output_path(args.out)
    check_output_path(args.plot, "--plot")
    if args.plot:  # refused now, not after the whole run (the JSON is written after the plot)
        from papershelf.device import has_module

        if not has_module("matplotlib"):
            raise MissingDependencyError("matplotlib", package="compact-attn", extra="plots")
    samples = check_int("--samples", args.samples, low=1)
    if args.task_yarn is not None:
        check_number("--task-yarn", args.task_yarn, low=1)
    for b in args.budgets:
        check_number("--budgets", b, low=0, high=1, low_open=True)
    for n in [*args.lengths, *args.task_lengths]:
        check_int("lengths", n, low=args.chunk + 1, high=1 << 15)
    from papershelf_lm.tasks import TASKS

    for t in args.tasks:
        if t not in TASKS:
            raise InputError(f"--tasks must be among {', '.join(TASKS)}, got {t!r}")
    started = time.time()
    result: dict = {
        "model": args.model, "task_model": args.task_model, "chunk": args.chunk, "block": args.block,
        "stride": args.stride, "rule": args.rule, "sink": args.sink, "pool": args.pool,
        "queries": args.queries, "curves": [],
        "tasks": [], "task_protocol": args.task_protocol, "task_yarn": args.task_yarn,
    }  # fmt: skip
    model, _ = lm.load(args.model) if args.lengths else (None, None)
    for n in args.lengths:
        c = testbed_curves(
            model,
            n,
            args.budgets,
            chunk=args.chunk,
            block=args.block,
            stride=args.stride,
            chunks_per_sample=check_int("--chunks", args.chunks, low=1, high=n // args.chunk),
            rule=args.rule,
            sink=args.sink,
            pool=args.pool,
            alloc=args.alloc,
            queries=args.queries,
        )
        result["curves"].append(c)
        last = c["chunks_per_sample"]
        print(f"{args.model} attention, n = {n}, last {last} chunks of {args.chunk} in each ")
        print(f"of {c['layers']} layers (block {args.block}):")
        rows = []
        for row in c["rows"]:
            rec = [row[m]["recall"] for m in METHOD_ORDER]
            err = [row[m]["rel_error"] for m in METHOD_ORDER]
            frac = row["compact-antidiag"]["kv_fraction"]
            rows.append([row["budget"], frac, *rec, *err])
        hdr = (
            ["budget", "KV read"] + [f"recall {m}" for m in METHOD_ORDER] + [f"err {m}" for m in METHOD_ORDER]
        )
        print(_table(hdr, rows) + "\n")
    from compact_attn.baselines import DenseAttention, QuokaAttention
    from compact_attn.compact import CompactAttention
    from compact_attn.selectors import make_selector

    tmodel, _ = lm.load(args.task_model)
    if args.task_yarn is not None:
        lm.extend_context(tmodel, args.task_yarn)
    factories = {
        "dense": lambda: DenseAttention(),
        "compact-antidiag": lambda: CompactAttention(make_selector("antidiagonal", budget=args.budget,
                                                                   **_sel_kw(args))),
        "compact-meanpool": lambda: CompactAttention(make_selector("meanpool", budget=args.budget,
                                                                   **_sel_kw(args, "meanpool"))),
        "compact-bound": lambda: CompactAttention(make_selector("bound", budget=args.budget,
                                                                **_sel_kw(args, "bound"))),
        "compact-tail": lambda: CompactAttention(make_selector("tail", budget=args.budget,
                                                               **_sel_kw(args, "tail"))),
        "quoka": lambda: QuokaAttention(args.budget),
    }  # fmt: skip
    rows = []
    for task in args.tasks:
        for n in args.task_lengths:
            acc = task_accuracy(
                tmodel,
                task,
                n,
                factories,
                chunk=args.chunk,
                block=args.block,
                samples=samples,
                protocol=args.task_protocol,
            )
            result["tasks"].append({"task": task, "n": n, "samples": samples, **acc})
            rows.append([task, n, *(acc[m] for m in factories)])
            print(f"  {task} n={n}: " + ", ".join(f"{m} {a:.2f}" for m, a in acc.items()), flush=True)
    setup = f"chunk {args.chunk}, block {args.block}, budget {args.budget:g}, protocol {args.task_protocol}"
    yarn = f" with YaRN x{args.task_yarn:g}" if args.task_yarn else ""
    print(f"\n{args.task_model}{yarn}, chunked prefill ({setup}), greedy accuracy over {samples} held-out "
          "samples:")  # fmt: skip
    print(_table(["task", "n", *factories], rows))
    result["seconds"] = time.time() - started
    if args.plot:
        _plot(result, args.plot)
    if args.out:
        from papershelf.repro import atomic_write_json, run_manifest

        atomic_write_json(args.out, {**result, "manifest": run_manifest()})
        print(f"wrote {args.out}")


def _plot(result: dict, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError("matplotlib", package="compact-attn", extra="plots") from None
    from papershelf.repro import atomic_path

    curves = result["curves"]
    fig, axes = plt.subplots(2, len(curves), figsize=(4.2 * len(curves), 6), squeeze=False)
    for i, c in enumerate(curves):
        for m in METHOD_ORDER:
            xs = [r["budget"] for r in c["rows"]]
            axes[0][i].plot(xs, [r[m]["recall"] for r in c["rows"]], marker="o", label=m)
            axes[1][i].plot(xs, [r[m]["rel_error"] for r in c["rows"]], marker="o", label=m)
        axes[0][i].set_title(f"{result['model']} n={c['n']}")
        axes[1][i].set_xlabel("KV budget (fraction of the past)")
        for ax in (axes[0][i], axes[1][i]):
            ax.set_xscale("log", base=2)
    axes[0][0].set_ylabel("attention-mass recall")
    axes[1][0].set_ylabel("output relative error")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path, mode="wb") as tmp:
        fig.savefig(tmp, format="png")
    print(f"wrote {path}")


# ---- eval ---------------------------------------------------------------------------------------------
@app.command(
    "eval",
    help="prefill a prompt with your local HF model in chunks: dense vs CompactAttention logits and tokens",
    args=[
        arg(
            "--model",
            required=True,
            metavar="PATH",
            help="a local Hugging Face model folder (Llama family), or a testbed name (tiny-s)",
        ),
        arg("--prompt-file", default=None, metavar="FILE.txt", help="UTF-8 prompt (default: built-in text)"),
        arg("--new-tokens", type=int, default=16),
        arg(
            "--decode",
            default="dense",
            help="decode steps after the prefill: dense (default, as a serving engine) or method",
        ),
        arg(
            "--max-tokens", type=int, default=None, help="truncate the prompt (default: the model's context)"
        ),
        arg("--selector", choices=["antidiagonal", "meanpool", "bound", "tail"], default="tail"),
        arg("--threads", type=int, default=1),
        *SEL_ARGS,
    ],
)
def _eval(args: argparse.Namespace) -> None:
    check_choice("--decode", args.decode, ("dense", "method"))
    path = model_folder(args.model)
    if args.prompt_file is not None:
        text = read_text(args.prompt_file, "--prompt-file")
    else:
        text = (Path(__file__).resolve().parent / "selectors.py").read_text(encoding="utf-8") * 2
    _check_sel(args)
    new = check_int("--new-tokens", args.new_tokens, low=1, high=4096)
    if args.max_tokens is not None:
        check_int("--max-tokens", args.max_tokens, low=1)
    _threads(args.threads)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from compact_attn.baselines import DenseAttention
    from compact_attn.compact import CompactAttention
    from compact_attn.hf import ChunkedPrefill
    from compact_attn.selectors import make_selector

    hf_logging.disable_progress_bar()  # stderr stays for errors
    try:  # a corrupt config.json must not be allocated first
        check_config_fits_weights(path)
    except InputError as exc:
        raise InputError(f"--model {args.model!r}: not a loadable Hugging Face model ({exc})") from None
    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, attn_implementation="sdpa")
    except Exception as exc:  # missing files, corrupt safetensors or config, shapes that do not match
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"--model {args.model!r}: not a loadable Hugging Face model ({first})") from None
    model.eval()
    context = getattr(model.config, "max_position_embeddings", None) or getattr(
        model.config, "n_positions", None
    )
    limit = args.max_tokens if args.max_tokens is not None else (context - new if context else None)
    if context and (limit is None or limit < 1 or limit + new > context):
        raise InputError(
            f"--max-tokens {limit} plus --new-tokens {new} must fit the model's {context} positions"
        )
    ids = tok(text, return_tensors="pt").input_ids[:, :limit]
    if ids.shape[1] == 0:
        raise InputError(f"--prompt-file {args.prompt_file!r} is empty")
    kw = _sel_kw(args, args.selector)
    compact = CompactAttention(make_selector(args.selector, budget=args.budget, **kw))
    t0 = time.perf_counter()
    dense_run = ChunkedPrefill(model, DenseAttention(), chunk=args.chunk, page_size=args.block)
    dense_logits = dense_run.prefill(ids)
    t1 = time.perf_counter()
    run = ChunkedPrefill(model, compact, chunk=args.chunk, page_size=args.block)
    logits = run.prefill(ids)
    t2 = time.perf_counter()
    rel = float((logits - dense_logits).norm() / dense_logits.norm())
    agree = float((logits.argmax(-1) == dense_logits.argmax(-1)).float().mean())
    kv = sum(run.fractions) / max(1, len(run.fractions))
    print(f"prompt {ids.shape[1]} tokens, chunk {args.chunk}, block {args.block}, {args.selector} budget "
          f"{args.budget:g}: mean KV fraction read {kv:.3f}")  # fmt: skip
    print(f"prefill: dense (SDPA) {t1 - t0:.2f} s, compact {t2 - t1:.2f} s; logits rel. error {rel:.4f}; "
          f"next-token argmax agreement {agree:.4f}")  # fmt: skip
    with torch.no_grad():
        d = ChunkedPrefill(model, DenseAttention(), chunk=args.chunk, page_size=args.block).generate(ids, new)
        c = ChunkedPrefill(model, compact, chunk=args.chunk, page_size=args.block).generate(
            ids, new, decode=args.decode
        )
    same = int((d[0] == c[0]).cumprod(0).sum())
    print(f"dense  : {tok.decode(d[0])!r}")
    print(f"compact: {tok.decode(c[0])!r}")
    print(f"identical leading tokens: {same} / {new}")


def main(argv=None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    app.run()
