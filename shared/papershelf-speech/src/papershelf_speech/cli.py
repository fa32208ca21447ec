"""The ``papershelf-speech`` command: build a corpus, train (or resume), evaluate, ship, list."""

from __future__ import annotations

import argparse
import json
import sys

from papershelf.cli import App, arg
from papershelf.errors import InputError
from papershelf_speech import __version__

app = App(
    "papershelf-speech",
    __version__,
    "The papershelf speech testbed: an offline TTS corpus, a spoofing proxy and a small CTC encoder.",
)


@app.command(
    "build-corpus",
    help="synthesise, augment and featurise a corpus into a folder (espeak-ng and flite)",
    args=[
        arg("--n-train", type=int, default=200),
        arg("--n-dev", type=int, default=40),
        arg("--n-test", type=int, default=60),
        arg("--sample-rate", type=int, default=16000, help="8000, 16000 or 22050"),
        arg("--engines", nargs="+", default=["espeak-ng", "flite"]),
        arg("--no-augment", action="store_true", help="leave the train split clean"),
        arg("--workers", type=int, default=1, help="synthesis processes"),
        arg(
            "--spoof",
            type=int,
            default=0,
            metavar="N",
            help="also write <split>.spoof.npz for the first N dev and test utterances",
        ),
    ],
    common=["seed", "out", "quiet"],
)
def _build(args: argparse.Namespace) -> None:
    from papershelf_speech.corpus import Corpus, CorpusConfig, build_corpus, corpus_hash

    if not args.out:
        raise InputError("--out is required (the corpus folder to create)")
    if args.workers < 1:
        raise InputError(f"--workers must be at least 1, got {args.workers}")
    if args.spoof < 0:
        raise InputError(f"--spoof must be >= 0, got {args.spoof}")
    config = CorpusConfig(n_train=args.n_train, n_dev=args.n_dev, n_test=args.n_test, seed=args.seed,
                          sample_rate=args.sample_rate, engines=tuple(args.engines),
                          augment=not args.no_augment)  # fmt: skip

    def progress(split, done, total):
        if not args.quiet and (done == total or done % 320 == 0):
            print(f"{split}: {done}/{total}", file=sys.stderr)

    folder = build_corpus(args.out, config, workers=args.workers, progress=progress)
    if args.spoof:
        from papershelf_speech.spoof import build_spoof_set, save_spoof_set

        corpus = Corpus(folder)
        for split in ("dev", "test"):
            save_spoof_set(build_spoof_set(corpus, split, args.spoof), folder / f"{split}.spoof.npz")
    print(json.dumps({"corpus": str(folder), "sha256": corpus_hash(folder)}))


@app.command(
    "train",
    help="train (or resume) the CTC encoder on a corpus into a run folder",
    args=[
        arg("--corpus", required=True, help="a folder written by build-corpus"),
        arg("--run", required=True, help="run folder (resumed when it holds a state)"),
        arg("--preset", default="ctc-small"),
        arg("--config", default=None, help="JSON file of TrainConfig fields overriding the defaults"),
        arg("--max-minutes", type=float, default=None, help="stop after this long (resume later)"),
        arg("--max-steps", type=int, default=None),
        arg("--threads", type=int, default=1, help="CPU threads (1 is fastest on a busy machine)"),
    ],
    common=["quiet"],
)
def _train(args: argparse.Namespace) -> None:
    from papershelf_speech.train import TrainConfig, train

    overrides = {}
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as handle:
                overrides = json.load(handle)
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"--config: {exc}") from None
        if not isinstance(overrides, dict):
            raise InputError(
                f"--config must hold a JSON object of TrainConfig fields, got {type(overrides).__name__}"
            )
    overrides.update(preset=args.preset, corpus=args.corpus)
    if args.max_steps is not None:
        overrides["max_steps"] = args.max_steps
    try:
        config = TrainConfig(**overrides)
    except TypeError as exc:
        raise InputError(f"--config: {exc}") from None
    result = train(config, args.run, max_minutes=args.max_minutes, threads=args.threads, quiet=args.quiet)
    print(json.dumps(result))


@app.command(
    "eval",
    help="greedy-CTC WER/CER on a split (held-out voices) and per-layer linear-probe accuracy",
    args=[
        arg("model", nargs="?", default="ctc-small", help="a shipped checkpoint name or a model folder"),
        arg("--corpus", required=True, help="a folder written by build-corpus"),
        arg("--split", default="test", choices=["train", "dev", "test"]),
        arg("-n", type=int, default=None, help="utterances to transcribe (default: all)"),
        arg("--probe-train", type=int, default=150, help="train utterances that fit the probes (0: skip)"),
        arg("--probe-test", type=int, default=100, help="test utterances that score the probes"),
    ],
    common=["out"],
)
def _eval(args: argparse.Namespace) -> None:
    import torch

    from papershelf.repro import atomic_write_json
    from papershelf_speech.corpus import Corpus
    from papershelf_speech.evaluate import evaluate_asr, probe_layers
    from papershelf_speech.model import load

    if args.n is not None and args.n < 1:
        raise InputError(f"-n must be at least 1, got {args.n}")
    if args.probe_train < 0 or args.probe_test < 1:
        raise InputError("--probe-train must be >= 0 and --probe-test >= 1")
    torch.set_num_threads(1)
    model = load(args.model)
    corpus = Corpus(args.corpus)
    result = {"model": str(args.model), "corpus_manifest": corpus.manifest["config"],
              "asr": evaluate_asr(model, corpus.split(args.split), args.n)}  # fmt: skip
    asr = result["asr"]
    print(f"{args.split} ({asr['utterances']} utterances, held-out voices): "
          f"WER {asr['wer']:.3f}  CER {asr['cer']:.3f}")  # fmt: skip
    for engine, row in asr["by_engine"].items():
        print(f"  {engine:<10} {row['utterances']:>5} utterances  WER {row['wer']:.3f}  CER {row['cer']:.3f}")
    if args.probe_train:
        probes = probe_layers(model, corpus.split("train"), corpus.split(args.split), args.probe_train,
                              args.probe_test)  # fmt: skip
        result["probe"] = probes
        baseline = probes["majority_baseline"]
        print(f"per-layer linear probe, character identity (majority baseline {baseline:.3f}):")
        for layer, acc in enumerate(probes["accuracy"]):
            print(f"  layer {layer:>2} {'(front end)' if layer == 0 else '':<11} {acc:.3f}")
    if args.out:
        atomic_write_json(args.out, result)


@app.command(
    "ship",
    help="copy a run's best model into the package as a named checkpoint (float16 safetensors)",
    args=[arg("run", help="a run folder written by train"), arg("--name", required=True)],
)
def _ship(args: argparse.Namespace) -> None:
    from papershelf_speech.model import ship

    print(f"shipped {args.run} as {args.name} in {ship(args.run, args.name)}")


@app.command("info", help="presets, shipped checkpoints (size, parameters, scores), voices and engines")
def _info(args: argparse.Namespace) -> None:
    import shutil

    from papershelf_speech.corpus import SPLITS, split_voices
    from papershelf_speech.engines import DEBIAN_PACKAGES
    from papershelf_speech.model import CHECKPOINTS, PRESETS, build_model, checkpoint_names, count_parameters

    for name, params in PRESETS.items():
        print(json.dumps({"preset": name, **params, "parameters": count_parameters(build_model(name))}))
    for name in checkpoint_names():
        folder = CHECKPOINTS / name
        size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
        entry = {"checkpoint": name, "megabytes": round(size / 2**20, 2)}
        if (folder / "eval.json").is_file():
            scores = json.loads((folder / "eval.json").read_text())
            entry["test_wer"] = round(scores["asr"]["wer"], 4)
            entry["test_cer"] = round(scores["asr"]["cer"], 4)
        print(json.dumps(entry))
    for engine, package in DEBIAN_PACKAGES.items():
        print(
            json.dumps(
                {"engine": engine, "debian_package": package, "found": shutil.which(engine) is not None}
            )
        )
    for split in SPLITS:
        print(json.dumps({"split": split, "voices": len(split_voices(split))}))


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
