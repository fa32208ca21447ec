"""The ``prism-attn`` command line: ``demo``, ``bench``, ``reproduce`` and ``eval --model PATH``."""

from __future__ import annotations

import argparse
import math
import time

from papershelf.cli import App, arg, check_threads, read_text
from papershelf.errors import InputError, MissingDependencyError, check_int, check_number
from papershelf.hf_folder import check_config_fits_weights, model_folder
from papershelf.repro import check_output_path, check_outputs
from prism_attn import __version__
from prism_attn.config import METHODS, PrismConfig

app = App(
    "prism-attn",
    __version__,
    "Proposal-refined cross-layer sparse attention for long-context decoding (Prism) and its baselines.",
)

CONFIG_ARGS = [
    arg("--kappa", type=float, default=None, help="budget: tokens (>= 1) or a fraction of n (< 1)"),
    arg("--radius", type=int, default=1, help="proposal dilation in blocks (default 1)"),
    arg("--block", type=int, default=16, help="proposal block size in tokens (default 16)"),
    arg(
        "--min-blocks",
        type=int,
        default=64,
        help="a small kappa spans at least this many blocks (0: fixed --block; default 64)",
    ),
    arg("--max-candidates", type=float, default=2.0, help="candidate cap as a multiple of kappa (default 2)"),
    arg("--anchor-every", type=int, default=None, help="an exact top-kappa layer every N layers (16)"),
    arg("--anchor-layers", type=int, nargs="+", default=None, help="explicit anchor layers"),
    arg(
        "--global-pages",
        type=float,
        default=1.0,
        help="the proposal's global term: top blocks by the Quest bound, as a multiple of kappa tokens "
        "(default 1; 0 = proposal from the previous selection only)",
    ),
    arg(
        "--global-min-pages",
        type=int,
        default=16,
        help="the global term proposes at least this many pages (default 16; matters for small kappa)",
    ),
    arg("--global-span", type=int, default=1, help="blocks per page of the global term (default 1)"),
    arg(
        "--global-dtype",
        default="auto",
        help="precision of the global term's page bounds: auto (bfloat16 for a float32 cache), same, or a "
        "dtype name (default auto)",
    ),
]


def _kappa(value, default):
    if value is None:
        return default
    if value <= 0 or not math.isfinite(value) or (value >= 1 and value != int(value)):
        raise InputError(
            f"--kappa must be a whole number of tokens (>= 1) or a fraction in (0, 1), got {value:g}"
        )
    return float(value) if value < 1 else int(value)


# PrismConfig's fields as the flags that set them, so an error names what the user typed
_FIELDS = "radius block min_blocks max_candidates anchor_every anchor_layers global_pages global_min_pages"
_FLAGS = {f: "--" + f.replace("_", "-") for f in (*_FIELDS.split(), "global_span", "global_dtype")}


def _config(args, method="prism", kappa=None) -> PrismConfig:
    try:
        return _make_config(args, method, kappa)
    except InputError as exc:
        msg = str(exc)
        field = msg.split(" ", 1)[0]
        if field in _FLAGS:
            raise InputError(_FLAGS[field] + msg[len(field) :]) from None
        raise


def _make_config(args, method, kappa) -> PrismConfig:
    return PrismConfig(
        method=method,
        kappa=_kappa(args.kappa, kappa if kappa is not None else 0.1),
        radius=args.radius,
        block=args.block,
        min_blocks=args.min_blocks,
        max_candidates=args.max_candidates,
        anchor_layers=None if args.anchor_layers is None else tuple(args.anchor_layers),
        global_pages=args.global_pages,
        global_min_pages=args.global_min_pages,
        global_span=args.global_span,
        global_dtype=args.global_dtype,
        **({} if args.anchor_every is None else {"anchor_every": args.anchor_every}),
    )


def _check_calibration_flags(args) -> None:
    """--calibrate-anchors N (≥ 1) replaces the anchor schedule: an explicit one would be silently ignored."""
    check_int("--calibrate-anchors", args.calibrate_anchors, low=1)
    for flag, value in (("--anchor-layers", args.anchor_layers), ("--anchor-every", args.anchor_every)):
        if value is not None:
            raise InputError(f"--calibrate-anchors chooses the anchor layers: drop {flag}")


def _threads(n: int) -> None:
    import torch

    torch.set_num_threads(check_threads(n))


def _table(header: list[str], rows: list[list]) -> str:
    def fmt(x):
        return f"{x:.4f}" if isinstance(x, float) else str(x)

    cells = [header] + [[fmt(x) for x in r] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = ["  ".join(c[i].rjust(widths[i]) for i in range(len(header))) for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---- demo ---------------------------------------------------------------------------------------------
@app.command(
    "demo",
    help="a synthetic 8-layer decode step with drifting salient spans: loss and error of every method",
    args=[arg("--n", type=int, default=4096, help="cache length (default 4096)")],
    common=("seed",),
)
def _demo(args: argparse.Namespace) -> None:
    n = check_int("--n", args.n, low=1024, high=1 << 16)
    import torch

    from prism_attn.data import planted_stack
    from prism_attn.decoder import PrismDecoder
    from prism_attn.ops import attention_loss, dense_decode

    shape = dict(layers=8, spans=4, span_len=16, drift=8, heads=8, kv_heads=2, head_dim=32, strength=6.0)
    qs, Ks, Vs, truth = planted_stack(n, **shape, dtype=torch.float32, seed=args.seed)
    kappa = n // 16
    print(f"one decode step, 8 layers, 8 query / 2 KV heads, n = {n}, kappa = n/16 = {kappa}; 4 spans of 16")
    print("salient tokens per KV head drift by <= 8 tokens from layer to layer (block 8, radius 1)\n")
    dense = [dense_decode(q, K, V) for q, K, V in zip(qs, Ks, Vs)]
    rows = []
    for method in ("oracle", "prism", "static", "quest", "dense"):
        cfg = PrismConfig(method=method, kappa=kappa, dense_layers=(), block=8, min_blocks=0, radius=1)
        dec = PrismDecoder(cfg, backend="torch")
        loss, err, recall = [], [], []
        for layer, (q, K, V) in enumerate(zip(qs, Ks, Vs)):
            o, sel = dec.step(layer, q, K, V)
            err.append(float((o - dense[layer]).norm() / dense[layer].norm()))
            if sel is None:
                loss.append(0.0)
                recall.append(1.0)
                continue
            loss.append(float(attention_loss(q, K, sel).mean()))
            hit = [torch.isin(truth[layer][0, j], sel[0, j]).float().mean() for j in range(2)]
            recall.append(float(sum(hit) / 2))
        rows.append([method, sum(loss) / 8, sum(err) / 8, sum(recall) / 8, f"{dec.bytes_read / 2**20:.1f}"])
    print(_table(["method", "attn loss", "out rel err", "span recall", "KV MiB read"], rows))


# ---- bench --------------------------------------------------------------------------------------------
TARGETS = {32768: 1 / 2.5, 131072: 1 / 5}
BENCH_COLUMNS = ("n", "kappa", "dense baseline", "dense ms", "prism ms", "speedup", "no-global ms", "speedup")
BENCH_COLUMNS += ("dense MiB", "prism MiB", "no-global MiB")


@app.command(
    "bench",
    help="decode-step time of a 32-layer stack (32 q / 8 KV heads, d 128, fp32), dense vs Prism, one run",
    args=[
        arg("--lengths", type=int, nargs="+", default=[32768, 131072], help="cache lengths"),
        arg("--layers", type=int, default=32),
        arg("--threads", type=int, default=2, help="torch CPU threads (default 2)"),
        arg("--repeat", type=int, default=3, help="interleaved repeats (default 3)"),
        arg(
            "--small-threads",
            type=int,
            default=None,
            help="threads for the refined layers' small ops (default: --threads; 1 on a loaded machine)",
        ),
        arg("--quick", action="store_true", help="tiny sizes in seconds, to prove the path works"),
        *CONFIG_ARGS,
    ],
    common=("out",),
)
def _bench(args: argparse.Namespace) -> None:
    from papershelf.bench import record, write_records
    from prism_attn.experiments import speed_stack

    _threads(args.threads)
    check_output_path(args.out)
    repeat = check_int("--repeat", args.repeat, low=1)
    small = None if args.small_threads is None else check_int("--small-threads", args.small_threads, low=1)
    layers = check_int("--layers", args.layers, low=1)  # checked even when --quick replaces them
    lengths = [check_int("--lengths", n, low=1, high=1 << 20) for n in args.lengths]
    if args.quick:
        sizes = [(2048, dict(layers=4, heads=8, kv_heads=2, head_dim=64))]
        kappa = 128
    else:
        sizes = [(n, dict(layers=layers)) for n in lengths]
        kappa = 2048
    cfg = _config(args, kappa=kappa)
    records, rows = [], []
    for n, shape in sizes:
        r = speed_stack(n, repeat=repeat, config=cfg, small_threads=small, **shape)
        times = [f"{r['dense_ms']:.1f}", f"{r['prism_ms']:.1f}", f"{r['speedup']:.2f}x"]
        times += [f"{r['prism_local_ms']:.1f}", f"{r['speedup_local']:.2f}x"]
        mib = [f"{r['dense_bytes'] / 2**20:.0f}", f"{r['prism_bytes'] / 2**20:.0f}"]
        mib.append(f"{r['prism_local_bytes'] / 2**20:.0f}")
        rows.append([n, r["kappa"], r["dense"], *times, *mib])
        setting = {"n": n, "threads": args.threads, "small_threads": small or args.threads, **shape}
        setting.update(kappa=r["kappa"], config=r["config"])
        records.append(
            record(
                package="prism-attn",
                version=__version__,
                benchmark=f"decode-stack-{n}" + ("-quick" if args.quick else ""),
                setting=setting,
                metric="decode-step time of the stack (s)",
                better="lower",
                candidate="prism",
                candidate_value=r["prism_ms"] / 1e3,
                baseline=r["dense"],
                baseline_value=r["dense_ms"] / 1e3,
                repeats=repeat,
                target=None if args.quick else TARGETS.get(n),
                dense_layer_ms=r["dense_layer_ms"],
                candidate_bytes=r["prism_bytes"],
                baseline_bytes=r["dense_bytes"],
                no_global_term_value=r["prism_local_ms"] / 1e3,
                no_global_term_bytes=r["prism_local_bytes"],
            )
        )
    print(
        _table(
            [*BENCH_COLUMNS],
            rows,
        )
    )
    for rec in records:
        t = rec["target"]
        if t is not None:
            print(f"{rec['benchmark']}: speedup {1 / rec['ratio']:.2f}x, target >= {1 / t:g}x: "
                  f"{'met' if rec['met'] else 'MISSED'}")  # fmt: skip
    if args.out:
        write_records(args.out, records)
        print(f"wrote {args.out}")


# ---- reproduce ----------------------------------------------------------------------------------------
@app.command(
    "reproduce",
    help="attention loss vs kappa (oracle/Prism/static/Quest) and needle accuracy at kappa = n/16 on tiny-s",
    args=[
        arg("--model", default="tiny-s", help="testbed checkpoint (default tiny-s)"),
        arg("--loss-lengths", type=int, nargs="+", default=[1024, 8192]),
        arg("--niah-lengths", type=int, nargs="+", default=[512, 1024]),
        arg("--samples", type=int, default=10, help="needle samples per length (default 10)"),
        arg(
            "--yarn",
            type=float,
            default=None,
            metavar="F",
            help="stretch the testbed model's RoPE to F x its trained context with YaRN (no training)",
        ),
        arg(
            "--calibrate-anchors",
            type=int,
            default=None,
            metavar="N",
            help="N exact layers (layer 0 and the N-1 of lowest proposal coverage) chosen on 4 held-out "
            "corpus texts as long as the longest needle length (replaces the anchor schedule)",
        ),
        arg("--threads", type=int, default=2),
        arg("--plot", default=None, metavar="FILE.png", help="attention-loss curves (needs matplotlib)"),
        *CONFIG_ARGS,
    ],
    common=("out",),
)
def _reproduce(args: argparse.Namespace) -> None:
    from prism_attn.experiments import _need_testbed, loss_curves, needle_accuracy, synthetic_curves

    if args.kappa is not None:  # silently ignoring it would mislabel the run
        raise InputError("reproduce sweeps its own budgets (loss: n/64 to n/8; needles: n/16): drop --kappa")
    lm = _need_testbed()
    _threads(args.threads)
    samples = check_int("--samples", args.samples, low=1)
    for flag, lengths in (("--loss-lengths", args.loss_lengths), ("--niah-lengths", args.niah_lengths)):
        for n in lengths:
            check_int(flag, n, low=256, high=16384)
    if args.yarn is not None:
        check_number("--yarn", args.yarn, low=1)
    if args.calibrate_anchors is not None:
        _check_calibration_flags(args)
        if not (args.niah_lengths or args.loss_lengths):
            raise InputError(
                "--calibrate-anchors needs a length to calibrate at (--niah-lengths or --loss-lengths)"
            )
    base = _config(args)
    check_outputs({"--out": args.out, "--plot": args.plot})
    if args.plot:
        _need_matplotlib()  # before the run, not after it
    try:
        model, _ = lm.load(args.model)
    except InputError as exc:
        raise InputError(f"--model: {exc}") from None
    except Exception as exc:  # a corrupt folder: unreadable weights, a config that does not load
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"--model {args.model!r}: not a loadable testbed model ({first})") from None
    if args.yarn is not None:
        lm.extend_context(model, args.yarn)
    calibration = None
    if args.calibrate_anchors is not None:
        from prism_attn.calibrate import calibrate_anchors
        from prism_attn.experiments import corpus_texts

        n_cal = max([*args.niah_lengths, *args.loss_lengths])
        k_cal = PrismConfig(**{**vars(base), "kappa": max(1, n_cal // 16)})
        calibration = calibrate_anchors(model, corpus_texts(n_cal), k_cal, anchors=args.calibrate_anchors)
        base = PrismConfig(**{**vars(base), "anchor_layers": calibration.anchor_layers})
        cov = ", ".join("-" if c is None else f"{c:.3f}" for c in calibration.coverage)
        print(f"calibrated anchors {calibration.anchor_layers} on 4 corpus texts of {n_cal} tokens "
              f"(proposal coverage by layer: {cov})\n")  # fmt: skip
    result: dict = {"model": args.model, "yarn": args.yarn, "config": {k: v for k, v in vars(base).items()}}
    if calibration is not None:
        result["calibration"] = vars(calibration)
    started = time.time()
    methods = ("oracle", "prism", "prism-local", "static", "quest")
    header = ["n", "kappa", *methods, "prism/static", "prism/oracle"]

    def rows_of(curves):
        ratios = ("prism", "static"), ("prism", "oracle")
        return [
            [r["n"], r["kappa"], *(r[m] for m in methods), *(r[a] / max(r[b], 1e-12) for a, b in ratios)]
            for r in curves["rows"]
        ]

    syn = synthetic_curves()
    print("mean attention loss, synthetic planted spans drifting <= 8 tokens/layer (8 layers, block 8):")
    print(_table(header, rows_of(syn)) + "\n")
    result["synthetic"] = syn
    result["testbed_loss"] = []
    for n in args.loss_lengths:
        curves = loss_curves(model, n, base=base)
        result["testbed_loss"].append(curves)
        n_layers = model.config.num_hidden_layers
        dense = sorted(d % n_layers for d in base.dense_layers)
        print(
            f"mean attention loss on {args.model} attention at n = {n} "
            f"(sparse layers of {n_layers}; dense: {', '.join(map(str, dense)) or 'none'}):"
        )
        print(_table(header, rows_of(curves)))
        errs = [[r["n"], r["kappa"], *(r["output_rel_error"][m] for m in methods)] for r in curves["rows"]]
        print("mean relative error of the attention output vs dense:")
        print(_table(header[:7], errs) + "\n")
    result["niah"] = []
    rows = []
    for n in args.niah_lengths:
        k = max(1, n // 16)
        configs = _needle_configs(base, k)
        acc = needle_accuracy(model, n, configs, samples=samples)
        result["niah"].append({"n": n, "kappa": k, "samples": samples, **acc})
        rows.append([n, k, *(acc[m] for m in NEEDLE_COLUMNS)])
    print(f"4-key NIAH greedy accuracy, kappa = n/16, {samples} held-out samples per length:")
    print(_table(["n", "kappa", *NEEDLE_COLUMNS], rows) + "\n")
    result["passkey"] = []
    rows = []
    for n in args.niah_lengths:
        k = max(1, n // 16)
        configs = _needle_configs(base, k)
        acc = needle_accuracy(model, n, configs, samples=samples, task="passkey")
        result["passkey"].append({"n": n, "kappa": k, "samples": samples, **acc})
        rows.append([n, k, *(acc[m] for m in NEEDLE_COLUMNS)])
    print(f"passkey greedy accuracy, kappa = n/16, {samples} held-out samples per length:")
    print(_table(["n", "kappa", *NEEDLE_COLUMNS], rows))
    result["seconds"] = time.time() - started
    if args.plot:
        _plot(result, args.plot)
    if args.out:
        from papershelf.repro import atomic_write_json, run_manifest

        atomic_write_json(args.out, {**result, "manifest": run_manifest()})
        print(f"wrote {args.out}")


NEEDLE_COLUMNS = ("dense", "oracle", "prism", "prism-local", "static", "quest")


def _needle_configs(base: PrismConfig, k: int) -> dict[str, PrismConfig]:
    """Every method at budget k; ``prism-local`` is Prism without the global term (global_pages = 0)."""
    configs = {m: PrismConfig(**{**vars(base), "method": m, "kappa": k}) for m in ("dense", *METHODS[:4])}
    configs["prism-local"] = PrismConfig(**{**vars(base), "method": "prism", "kappa": k, "global_pages": 0})
    return {m: configs[m] for m in NEEDLE_COLUMNS}


def _need_matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError("matplotlib", package="prism-attn", extra="plots") from None
    return plt


def _plot(result: dict, path: str) -> None:
    plt = _need_matplotlib()
    from papershelf.repro import atomic_path

    panels = [("synthetic", result["synthetic"])] + [
        (f"{result['model']} n={c['n']}", c) for c in result["testbed_loss"]
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    for ax, (title, curves) in zip(list(getattr(axes, "flat", [axes])), panels):
        for m in ("oracle", "prism", "prism-local", "static", "quest"):
            ax.plot([r["kappa"] for r in curves["rows"]], [r[m] for r in curves["rows"]], marker="o", label=m)
        ax.set_xscale("log", base=2)
        ax.set_title(title)
        ax.set_xlabel("kappa")
    axes_list = list(getattr(axes, "flat", [axes]))
    axes_list[0].set_ylabel("attention loss")
    axes_list[0].legend()
    fig.tight_layout()
    with atomic_path(path, mode="wb") as tmp:
        fig.savefig(tmp, format="png")
    print(f"wrote {path}")


# ---- eval ---------------------------------------------------------------------------------------------
@app.command(
    "eval",
    help="decode a prompt with your local HF model, dense and sparse, and compare the tokens",
    args=[
        arg(
            "--model",
            required=True,
            metavar="PATH",
            help="a local Hugging Face model folder, or a testbed name (tiny-s)",
        ),
        arg("--prompt-file", required=True, metavar="FILE.txt", help="the prompt, as UTF-8 text"),
        arg("--new-tokens", type=int, default=32),
        arg("--method", choices=METHODS, default="prism"),
        arg("--threads", type=int, default=2),
        arg(
            "--calibrate-anchors",
            type=int,
            default=None,
            metavar="N",
            help="N exact layers (layer 0 and the N-1 of lowest proposal coverage) chosen on development "
            "text before decoding (replaces the anchor schedule; --method prism or static)",
        ),
        arg(
            "--calibration-file",
            default=None,
            metavar="FILE.txt",
            help="the development text for --calibrate-anchors, UTF-8 (default: the prompt itself)",
        ),
        *CONFIG_ARGS,
    ],
)
def _eval(args: argparse.Namespace) -> None:
    path = model_folder(args.model)
    prompt = read_text(args.prompt_file, "--prompt-file")
    new = check_int("--new-tokens", args.new_tokens, low=1, high=4096)
    cfg = _config(args, method=args.method)
    calibration_text = _calibration_text(args, cfg, prompt)
    _threads(args.threads)
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise MissingDependencyError("transformers", package="prism-attn", extra="hf") from None
    from transformers.utils import logging as hf_logging

    from prism_attn.hf import MODEL_TYPES, enable

    hf_logging.disable_progress_bar()  # stderr stays for errors
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # no multi-line load report: what matters is checked below
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        model_type = getattr(config, "model_type", None)
        if model_type not in MODEL_TYPES:  # checked before any (randomly initialised) model is built
            raise InputError(
                f"--model {args.model!r} is a {model_type!r} model; eval decodes Llama-family causal LMs "
                f"(model_type {', '.join(MODEL_TYPES)})"
            )
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        try:  # a corrupt config.json must not be allocated first
            check_config_fits_weights(path)
        except InputError as exc:
            raise InputError(f"--model {args.model!r}: not a loadable Hugging Face model ({exc})") from None
        model, info = AutoModelForCausalLM.from_pretrained(
            path, config=config, local_files_only=True, attn_implementation="sdpa", output_loading_info=True
        )
    except InputError:
        raise
    except Exception as exc:  # missing files, corrupt safetensors or config, shapes that do not match
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "ignore_mismatched_sizes" in first:  # its "above report" is silenced
            first = "weights whose shapes do not match its config.json"
        raise InputError(f"--model {args.model!r}: not a loadable Hugging Face model ({first})") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    missing = sorted(info.get("missing_keys") or ())
    if missing:  # transformers fills them with random values and carries on
        raise InputError(
            f"--model {args.model!r}: {len(missing)} weight(s) are missing from the folder and would be "
            f"randomly initialised (e.g. {missing[0]!r})"
        )
    model.eval()
    ids = tok(prompt, return_tensors="pt").input_ids
    if ids.shape[1] == 0:
        raise InputError(f"--prompt-file {args.prompt_file!r} is empty")
    limit = getattr(model.config, "max_position_embeddings", None) or getattr(
        model.config, "n_positions", None
    )
    if limit and ids.shape[1] + new > limit:
        raise InputError(
            f"the prompt ({ids.shape[1]} tokens) plus --new-tokens {new} exceeds the model's {limit} "
            "positions; shorten the prompt or lower --new-tokens"
        )

    if calibration_text is not None:
        cfg = _calibrated(model, tok, cfg, args, calibration_text, ids.shape[1])

    def generate():
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=new, do_sample=False, use_cache=True)
        return out[0, ids.shape[1] :]

    t0 = time.perf_counter()
    dense = generate()
    t1 = time.perf_counter()
    with enable(model, cfg) as handle:
        sparse = generate()
    t2 = time.perf_counter()
    m = min(len(dense), len(sparse))
    agree = int((dense[:m] == sparse[:m]).cumprod(0).sum())
    print(
        f"prompt {ids.shape[1]} tokens; kappa at that length {cfg.budget(ids.shape[1])}; method {cfg.method}"
    )
    print(f"dense : {tok.decode(dense)!r}  ({t1 - t0:.2f} s)")
    print(
        f"{cfg.method:6s}: {tok.decode(sparse)!r}  ({t2 - t1:.2f} s, {handle.calls['decode']} sparse calls)"
    )
    print(f"identical leading tokens: {agree} / {m}")


def _calibration_text(args: argparse.Namespace, cfg: PrismConfig, prompt: str) -> str | None:
    """The text to calibrate the anchors on, or ``None`` without --calibrate-anchors (checked before the
    model is loaded)."""
    if args.calibrate_anchors is None:
        if args.calibration_file is not None:
            raise InputError("--calibration-file is the text for --calibrate-anchors N: give both")
        return None
    _check_calibration_flags(args)
    if cfg.method not in ("prism", "static"):
        raise InputError(f"--calibrate-anchors picks anchor layers: use it with --method prism or static, "
                         f"not {cfg.method}")  # fmt: skip
    if args.calibration_file is None:
        return prompt
    return read_text(args.calibration_file, "--calibration-file")


CALIBRATION_WINDOWS = 4  # a long development text is cut into at most this many windows


def _calibration_windows(tok, text: str, width: int, where: str) -> list:
    """``text`` as up to 4 consecutive windows of at most ``width`` tokens, each starting with the special
    tokens the tokenizer puts before a text (a BOS), as the prompt does, so each window has its sink."""
    import torch

    from prism_attn.calibrate import QUERIES

    prefix = tok("", return_tensors="pt").input_ids  # e.g. [BOS] for Llama tokenizers, nothing for bytes
    body = tok(text, add_special_tokens=False, return_tensors="pt").input_ids
    step = width - prefix.shape[1]
    if step <= QUERIES:
        raise InputError(f"--calibrate-anchors needs windows of more than {QUERIES} tokens, "
                         f"and windows are as long as the prompt ({width} tokens)")  # fmt: skip
    chunks = [body[:, i : i + step] for i in range(0, body.shape[1], step)][:CALIBRATION_WINDOWS]
    windows = [torch.cat([prefix, c], 1) for c in chunks if c.shape[1] > QUERIES]
    if not windows:
        raise InputError(f"{where} has {body.shape[1]} tokens; --calibrate-anchors needs more than "
                         f"{QUERIES}")  # fmt: skip
    return windows  # a short tail window is dropped


def _calibrated(model, tok, cfg: PrismConfig, args, text: str, prompt_tokens: int) -> PrismConfig:
    """``cfg`` with the anchors calibrate_anchors picks on ``text``, in windows as long as the prompt: κ is
    then the decode's, and the windows fit the model's positions as the prompt does (checked before)."""
    from prism_attn.calibrate import QUERIES, calibrate_anchors

    where = "the prompt" if args.calibration_file is None else f"--calibration-file {args.calibration_file!r}"
    layers = int(model.config.num_hidden_layers)
    anchors = check_int("--calibrate-anchors", args.calibrate_anchors, low=1, high=layers)
    windows = _calibration_windows(tok, text, prompt_tokens, where)
    cal = calibrate_anchors(model, windows, cfg, anchors=anchors, queries=QUERIES)
    cov = ", ".join("-" if c is None else f"{c:.3f}" for c in cal.coverage)
    sizes = "/".join(str(w.shape[1]) for w in windows)
    print(f"calibrated anchors {cal.anchor_layers} on {where} ({sizes} tokens; proposal coverage by "
          f"layer: {cov})")  # fmt: skip
    return PrismConfig(**{**vars(cfg), "anchor_layers": cal.anchor_layers})


def main(argv=None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    app.run()
