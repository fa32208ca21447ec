"""Merging LoRA adapters of a federated and a local fine-tune, on PEFT state dicts and adapter folders.

Two ways to mix a LoRA module ``ΔW = s B A`` (s = lora_alpha / r):

* ``mode="factors"`` (the paper's practice, Appendix B of the notes): ``A = λ A_F + (1 − λ) A_L`` and
  ``B = λ B_F + (1 − λ) B_L``. The rank stays r, the adapter stays a drop-in PEFT adapter, but the
  product ``B A`` carries cross terms ``λ(1 − λ)(B_F A_L + B_L A_F)`` that the bound does not cover, and
  it needs both adapters to share rank and scaling.
* ``mode="product"`` (the theory's object): ``ΔW = λ s_F B_F A_F + (1 − λ) s_L B_L A_L`` exactly. It is
  written back as one LoRA of rank ``r_F + r_L``: ``A = [A_F; A_L]``, ``B = [λ B_F, (1 − λ)(s_L/s_F) B_L]``
  with the federated scaling kept, so no information is lost and the ranks may differ.

State-dict keys may use PEFT's saved naming (``….lora_A.weight``) or the live-module naming
(``….lora_A.default.weight``); modules are the key prefixes before ``.lora_A``/``.lora_B``.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from papershelf.errors import InputError, check_number

_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<which>[AB])(?:\.(?P<adapter>[^.]+))?\.weight$")
MODES = ("factors", "product")
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


def lora_modules(state: Mapping[str, torch.Tensor], who: str = "adapter") -> dict[str, tuple[str, str]]:
    """Module name -> (key of A, key of B). Raises when a module lacks one factor or a key is foreign."""
    found: dict[str, dict[str, str]] = {}
    for key in state:
        m = _KEY.match(key)
        if m is None:
            raise InputError(
                f"{who}: key {key!r} is not a LoRA factor",
                hint="only plain LoRA adapters (lora_A/lora_B weights) can be merged",
            )
        prev = found.setdefault(m["module"], {}).get(m["which"])
        if prev is not None:  # e.g. "x.lora_A.weight" beside "x.lora_A.default.weight": which one?
            raise InputError(
                f"{who}: module {m['module']!r} has two lora_{m['which']} entries ({prev!r}, {key!r})"
            )
        found[m["module"]][m["which"]] = key
    out = {}
    for mod, d in found.items():
        if set(d) != {"A", "B"}:
            raise InputError(f"{who}: module {mod!r} has lora_{''.join(d)} but not both lora_A and lora_B")
        out[mod] = (d["A"], d["B"])
    if not out:
        raise InputError(f"{who}: no LoRA modules found")
    return out


def module_of(key: str) -> str:
    """The module a LoRA parameter key belongs to."""
    m = _KEY.match(key)
    if m is None:
        raise InputError(f"key {key!r} is not a LoRA factor")
    return m["module"]


def canonical_key(key: str) -> str:
    """``x.lora_A.default.weight`` -> ``x.lora_A.weight`` (PEFT's saved naming)."""
    m = _KEY.match(key)
    return key if m is None else f"{m['module']}.lora_{m['which']}.weight"


def check_lora_config(config: Mapping[str, Any], who: str = "adapter config") -> None:
    """``r`` a positive integer and ``lora_alpha`` a finite non-zero number (PEFT's defaults when absent),
    no per-module ``rank_pattern``/``alpha_pattern``.

    A zero ``lora_alpha`` scales the update to nothing (the adapter is a no-op) and cannot be written back
    in ``mode="product"``, which keeps the federated scaling (it divided by zero)."""
    for key in ("rank_pattern", "alpha_pattern"):
        if config.get(key):
            raise InputError(f"{who} uses {key}; per-module ranks/alphas are not supported")
    r, alpha = config.get("r", 8), config.get("lora_alpha", 8)
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise InputError(f"{who}: r must be a positive integer, got {r!r}")
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, int | float)
        or not math.isfinite(alpha)
        or alpha == 0
    ):
        raise InputError(f"{who}: lora_alpha must be a finite non-zero number, got {alpha!r}")


def lora_scale(config: Mapping[str, Any] | None, module: str) -> float:
    """The scaling s of a module under a PEFT LoraConfig dict (lora_alpha / r, or / √r with rsLoRA)."""
    if config is None:
        return 1.0
    check_lora_config(config)
    r, alpha = config.get("r", 8), config.get("lora_alpha", 8)
    return alpha / (math.sqrt(r) if config.get("use_rslora") else r)


def _weights_for(weight: float | Mapping[str, float], modules) -> dict[str, float]:
    if isinstance(weight, Mapping):
        missing = [m for m in modules if m not in weight]
        if missing:
            raise InputError(f"no mixing weight for module {missing[0]!r}")
        return {m: check_number(f"weight of module {m!r}", weight[m], low=0, high=1) for m in modules}
    w = check_number("weight", weight, low=0, high=1) + 0.0  # -0.0 -> 0.0 (printed as "λ = -0.0000")
    return dict.fromkeys(modules, w)


def check_compatible(
    fed: Mapping[str, torch.Tensor], loc: Mapping[str, torch.Tensor], *, same_rank: bool = True
) -> dict[str, tuple[tuple[str, str], tuple[str, str]]]:
    """Module -> ((A_F, B_F), (A_L, B_L)) keys, after checking target modules and shapes agree."""
    mf, ml = lora_modules(fed, "global adapter"), lora_modules(loc, "local adapter")
    only_f, only_l = sorted(set(mf) - set(ml)), sorted(set(ml) - set(mf))
    if only_f or only_l:
        what = (
            f"module {only_f[0]!r} is in the global adapter only"
            if only_f
            else f"module {only_l[0]!r} is in the local adapter only"
        )
        raise InputError(f"the adapters target different modules: {what}")
    out = {}
    for mod in mf:
        (af, bf), (al, bl) = mf[mod], ml[mod]
        for k, t in ((af, fed[af]), (bf, fed[bf]), (al, loc[al]), (bl, loc[bl])):
            if t.ndim != 2:
                raise InputError(f"module {mod!r}: {k!r} is not a matrix (shape {tuple(t.shape)})")
            if not t.is_floating_point():  # an integer/bool mix would be truncated silently
                raise InputError(
                    f"module {mod!r}: {k!r} has dtype {t.dtype}; LoRA factors are floating point"
                )
            if not torch.isfinite(t).all():
                raise InputError(f"module {mod!r}: {k!r} contains NaN or inf")
        sa_f, sb_f, sa_l, sb_l = fed[af].shape, fed[bf].shape, loc[al].shape, loc[bl].shape
        if sb_f[1] != sa_f[0] or sb_l[1] != sa_l[0]:
            raise InputError(f"module {mod!r}: lora_B columns do not match lora_A rows")
        if sa_f[1] != sa_l[1] or sb_f[0] != sb_l[0]:
            raise InputError(
                f"module {mod!r}: the adapters adapt different shapes "
                f"({sb_f[0]}x{sa_f[1]} vs {sb_l[0]}x{sa_l[1]})"
            )
        if same_rank and sa_f[0] != sa_l[0]:
            raise InputError(
                f"module {mod!r}: ranks differ ({sa_f[0]} vs {sa_l[0]}); mode='factors' needs equal ranks",
                hint="use mode='product'",
            )
        out[mod] = ((af, bf), (al, bl))
    return out


def merge_lora(
    fed: Mapping[str, torch.Tensor],
    loc: Mapping[str, torch.Tensor],
    weight: float | Mapping[str, float],
    *,
    mode: str = "factors",
    fed_config: Mapping[str, Any] | None = None,
    loc_config: Mapping[str, Any] | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
    """Merge two LoRA state dicts with weight λ on the federated one (a float or one per module).

    Returns the merged state dict (keys and dtypes of ``fed``) and, when ``fed_config`` is given, the
    config the merged adapter needs (rank and alpha change in ``mode="product"``).
    """
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    pairs = check_compatible(fed, loc, same_rank=mode == "factors")
    lam = _weights_for(weight, pairs)
    out: dict[str, torch.Tensor] = {}
    config = dict(fed_config) if fed_config is not None else None
    if mode == "factors":
        for mod, ((af, bf), (al, bl)) in pairs.items():
            sf, sl = lora_scale(fed_config, mod), lora_scale(loc_config or fed_config, mod)
            if not math.isclose(sf, sl, rel_tol=1e-12):
                raise InputError(
                    f"module {mod!r}: LoRA scalings differ ({sf:g} vs {sl:g}); mode='factors' needs equal "
                    "lora_alpha/r",
                    hint="use mode='product'",
                )
            w = lam[mod]
            for kf, kl in ((af, al), (bf, bl)):
                out[kf] = (w * fed[kf].double() + (1 - w) * loc[kl].double()).to(fed[kf].dtype)
                if w == 1.0:
                    out[kf] = fed[kf].clone()
                elif w == 0.0:
                    out[kf] = loc[kl].to(fed[kf].dtype).clone()
        return out, config
    ranks = set()
    for mod, ((af, bf), (al, bl)) in pairs.items():
        sf, sl = lora_scale(fed_config, mod), lora_scale(loc_config or fed_config, mod)
        w = lam[mod]
        out[af] = torch.cat([fed[af], loc[al].to(fed[af].dtype)], 0)
        out[bf] = torch.cat(
            [
                (w * fed[bf].double()).to(fed[bf].dtype),
                ((1 - w) * (sl / sf) * loc[bl].double()).to(fed[bf].dtype),
            ],
            1,
        )
        ranks.add(out[af].shape[0])
    if config is not None:
        if len(ranks) != 1:
            raise InputError("mode='product' needs one rank per adapter (no rank_pattern)")
        r_new = ranks.pop()
        s = lora_scale(fed_config, next(iter(pairs)))
        config["r"] = r_new
        config["lora_alpha"] = s * (math.sqrt(r_new) if config.get("use_rslora") else r_new)
    return out, config


def delta_weights(state: Mapping[str, torch.Tensor], config: Mapping[str, Any] | None = None):
    """Module -> the dense update ``s B A`` (float64) an adapter applies."""
    return {
        mod: lora_scale(config, mod) * (state[b].double() @ state[a].double())
        for mod, (a, b) in lora_modules(state).items()
    }


# ---- PEFT adapter folders -----------------------------------------------------------------------------
def load_adapter(path: str | os.PathLike[str], who: str = "adapter") -> tuple[dict[str, torch.Tensor], dict]:
    """Read a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors)."""
    from safetensors.torch import load_file

    p = Path(path)
    if not p.is_dir():
        raise InputError(f"{who} {str(path)!r} is not a folder")
    cfg_path, w_path = p / ADAPTER_CONFIG, p / ADAPTER_WEIGHTS
    if not cfg_path.is_file():
        raise InputError(f"{who} {str(path)!r} has no {ADAPTER_CONFIG}")
    if not w_path.is_file():
        raise InputError(f"{who} {str(path)!r} has no {ADAPTER_WEIGHTS}", hint="save with safe_serialization")
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{who}: {cfg_path} is not valid JSON ({exc.msg})") from None
    except UnicodeDecodeError:
        raise InputError(f"{who}: {cfg_path} is not UTF-8 text") from None
    if not isinstance(config, dict):
        raise InputError(f"{who}: {cfg_path} must hold a JSON object, got {type(config).__name__}")
    if config.get("peft_type", "LORA") != "LORA":
        raise InputError(
            f"{who}: {cfg_path} is not a LoRA adapter config (peft_type {config.get('peft_type')!r})"
        )
    if config.get("use_dora"):
        raise InputError(f"{who}: DoRA adapters are not supported")
    check_lora_config(config, f"{who}: {cfg_path}")
    try:
        state = load_file(str(w_path))
    except Exception as exc:
        raise InputError(f"{who}: cannot read {w_path} ({exc})") from None
    r = config.get("r", 8)
    for mod, (a, _b) in lora_modules(state, who).items():
        if state[a].ndim == 2 and state[a].shape[0] != r:  # PEFT could not load it either
            raise InputError(
                f"{who}: module {mod!r} has rank {state[a].shape[0]} (rows of lora_A) "
                f"but {cfg_path} says r = {r}"
            )
    return state, config


def save_adapter(path: str | os.PathLike[str], state: Mapping[str, torch.Tensor], config: Mapping[str, Any]):
    """Write a PEFT adapter folder atomically (a temporary folder renamed into place)."""
    from safetensors.torch import save_file

    dest = Path(path)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InputError(f"--out {str(path)!r} exists and is not an empty folder")
    try:  # e.g. a parent under /proc, or below an existing regular file
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    except OSError as exc:
        why = exc.strerror or str(exc)
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            why = "a parent of it is a file, not a folder"
        raise InputError(f"--out {str(path)!r}: cannot create a folder there ({why})") from None
    try:
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp / ADAPTER_WEIGHTS))
        (tmp / ADAPTER_CONFIG).write_text(
            json.dumps(dict(config), indent=2, default=str) + "\n", encoding="utf-8"
        )
        if dest.exists():
            dest.rmdir()
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def adapter_bytes(state: Mapping[str, torch.Tensor]) -> int:
    """Bytes of the adapter's tensors (what one upload or download of it costs)."""
    return sum(t.numel() * t.element_size() for t in state.values())


# ---- live PEFT models ---------------------------------------------------------------------------------
def merge_peft_models(fed_model, loc_model, weight, *, mode: str = "factors", adapter_name: str = "default"):
    """Merge the LoRA adapters of two PEFT models (same base) into a copy of ``fed_model``.

    ``mode="factors"`` loads the mixed factors into the copy's adapter; ``mode="product"`` adds a new
    adapter named ``"potara"`` of rank r_F + r_L holding the exact convex mix of the two updates and
    makes it active. Returns the new PeftModel; the inputs are not modified.
    """
    import copy

    from peft import LoraConfig, get_peft_model_state_dict, set_peft_model_state_dict

    for who, m in (("fed_model", fed_model), ("loc_model", loc_model)):
        if adapter_name not in getattr(m, "peft_config", {}):
            raise InputError(f"{who} has no PEFT adapter named {adapter_name!r}")
    cfg_f = fed_model.peft_config[adapter_name].to_dict()
    cfg_l = loc_model.peft_config[adapter_name].to_dict()
    fed = get_peft_model_state_dict(fed_model, adapter_name=adapter_name)
    loc = get_peft_model_state_dict(loc_model, adapter_name=adapter_name)
    merged, cfg = merge_lora(fed, loc, weight, mode=mode, fed_config=cfg_f, loc_config=cfg_l)
    out = copy.deepcopy(fed_model)
    if mode == "factors":
        set_peft_model_state_dict(out, merged, adapter_name=adapter_name)
        return out
    keep = ("r", "lora_alpha", "target_modules", "lora_dropout", "bias", "use_rslora", "fan_in_fan_out")
    new_cfg = LoraConfig(**{k: cfg[k] for k in keep if k in cfg})
    out.add_adapter("potara", new_cfg)
    set_peft_model_state_dict(out, merged, adapter_name="potara")
    out.set_adapter("potara")
    return out
