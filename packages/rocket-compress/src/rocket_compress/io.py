"""Model folders: load any local HF causal LM (dense or ROCKET-compressed), save compressed models.

A compressed folder is a normal HF folder (``config.json``, tokenizer files) plus ``model.safetensors``
holding the factorized weights and ``rocket_compress.json`` describing each ``FactorizedLinear`` (shapes,
rank, ELL width). Saving goes to a temporary folder renamed into place only when complete.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn

from papershelf.errors import InputError
from papershelf.hf_folder import check_config_fits_weights
from rocket_compress.modules import FactorizedLinear

META = "rocket_compress.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "generation_config.json",
)


def _causal_lm_config(folder: Path):
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if not folder.is_dir():
        raise InputError(f"model folder {str(folder)!r} does not exist")
    if not (folder / "config.json").is_file():
        raise InputError(f"{folder} is not a Hugging Face model folder (no config.json)")
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
    except Exception as exc:
        raise InputError(f"cannot read {folder / 'config.json'}: {str(exc).splitlines()[0]}") from None
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise InputError(f"{folder} holds a {config.model_type!r} model, not a causal LM")
    archs = getattr(config, "architectures", None) or []
    if archs and not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        raise InputError(f"{folder} holds a {archs[0]} model, not a causal LM")
    return config


def load_model(folder, *, dtype=torch.float32) -> nn.Module:
    """A causal LM from a local folder (dense HF weights, or a folder written by :func:`save_compressed`)."""
    folder = Path(folder)
    config = _causal_lm_config(folder)
    if (folder / META).is_file():
        return load_compressed(folder)
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:  # a corrupt config.json must not be allocated first
        check_config_fits_weights(folder)
    except InputError as exc:
        raise InputError(f"cannot load the model in {folder}: {exc}") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(
            folder, local_files_only=True, dtype=dtype, config=config
        )
    except Exception as exc:
        raise InputError(f"cannot load the model in {folder}: {str(exc).splitlines()[0]}") from None
    return model.eval()


def load_tokenizer(folder):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(Path(folder), local_files_only=True)
    except Exception as exc:
        raise InputError(f"cannot load a tokenizer from {folder}: {str(exc).splitlines()[0]}") from None


def save_compressed(
    model: nn.Module, out, *, report: dict | None = None, source=None, tokenizer=None, overwrite=False
) -> Path:
    """Write ``model`` (with its FactorizedLinear layers) to folder ``out`` atomically; returns the path.

    ``source``: a model folder whose tokenizer files are copied along; ``tokenizer``: one to save with it.
    """
    from safetensors.torch import save_model

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise InputError(f"output folder {out} exists and is not empty", hint="choose a new --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        layers = {
            name: {
                "in_features": m.in_features,
                "out_features": m.out_features,
                "rank": m.rank,
                "width": m.width,
                "bias": m.bias is not None,
                "dtype": str(m.a.dtype).replace("torch.", ""),
            }
            for name, m in model.named_modules()
            if isinstance(m, FactorizedLinear)
        }
        model.config.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"))
        from rocket_compress import __version__

        meta = {"format": "rocket-compress", "version": __version__, "layers": layers}
        (tmp / META).write_text(json.dumps(meta, indent=1) + "\n")
        if report is not None:
            (tmp / "rocket_report.json").write_text(json.dumps(report, indent=1) + "\n")
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        if source is not None:
            for f in TOKENIZER_FILES:
                if (Path(source) / f).is_file():
                    shutil.copy2(Path(source) / f, tmp / f)
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def load_compressed(folder) -> nn.Module:
    """Rebuild a model saved by :func:`save_compressed`; its outputs equal the saved model's bit for bit."""
    from safetensors.torch import load_model as st_load
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    config = _causal_lm_config(folder)
    try:
        meta = json.loads((folder / META).read_text())
        layers = meta["layers"]
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"{folder / META} is unreadable: {exc}") from None
    model = AutoModelForCausalLM.from_config(config, dtype=_stored_dtype(folder / "model.safetensors"))
    for name, spec in layers.items():
        try:
            model.get_submodule(name)
        except AttributeError:
            raise InputError(f"{folder / META} names a layer {name!r} the model does not have") from None
        new = FactorizedLinear(
            spec["in_features"],
            spec["out_features"],
            spec["rank"],
            spec["width"],
            bias=spec["bias"],
            dtype=getattr(torch, spec["dtype"]),
        )
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, new)
    try:
        missing, unexpected = st_load(model, str(folder / "model.safetensors"), strict=False)
    except Exception as exc:
        raise InputError(f"cannot read {folder / 'model.safetensors'}: {str(exc).splitlines()[0]}") from None
    head = model.get_output_embeddings()
    tied = (
        {"lm_head.weight"}
        if head is not None and head.weight is model.get_input_embeddings().weight
        else set()
    )
    missing = [m for m in missing if m not in tied]
    if missing or unexpected:
        raise InputError(
            f"{folder} does not match its config: missing {missing[:2]}, unexpected {unexpected[:2]}"
        )
    return model.eval()


def _stored_dtype(path: Path) -> torch.dtype:
    """The dtype of the first non-integer tensor in a safetensors file (the model's weight dtype)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                t = f.get_slice(key)
                name = t.get_dtype()
                if name.startswith(("F", "BF")):
                    return {
                        "F32": torch.float32,
                        "F16": torch.float16,
                        "BF16": torch.bfloat16,
                        "F64": torch.float64,
                    }[name]
    except Exception as exc:
        raise InputError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    return torch.float32
