"""JSON schema -> regular expression for compact JSON (no whitespace, properties in schema order).

Supported: ``type`` object (``properties``, ``required``; all listed properties are emitted in order,
optional ones may be left out; ``additionalProperties`` is accepted and extra properties are never
emitted), string (``enum``, ``const``, ``pattern``, ``minLength``/``maxLength``), integer (``minimum``,
``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, one- or two-sided, any size), number, boolean,
null, array (``items``, ``minItems``/``maxItems``), ``enum``/``const`` of any scalar, ``anyOf``/``oneOf``
(as alternation), and annotations (``title``, ``description``, ``default``, ...).  Any other keyword, a
keyword on a type it does not apply to, an empty range and a ``pattern`` that could put a quote, a
backslash or a control character into the string raise :class:`~papershelf.errors.InputError`: the
constraint must never accept a text the schema rejects.

>>> schema_to_regex({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
'\\\\{"ok":(true|false)\\\\}'
"""

from __future__ import annotations

import json
import re
from typing import Any

from dlm_constrain.regex import _MAX_REPEAT
from papershelf.errors import InputError

_STRING_CHAR = r'[^"\\\x00-\x1f]'
_INT = r"-?(0|[1-9][0-9]*)"
_NUMBER = _INT + r"(\.[0-9]+)?([eE][+-]?[0-9]+)?"
_MAX_RANGE = 2000


def _escape(text: str) -> str:
    return "".join("\\" + c if c in "\\.[]{}()*+?|^$-" else c for c in text)


def _literal(value: Any) -> str:
    return _escape(json.dumps(value, separators=(",", ":")))


def _int_range(lo: int | None, hi: int | None) -> str:
    """The integers in [lo, hi] (None: unbounded) in canonical decimal. Small ranges are enumerated (the
    form every earlier release emitted); others are built digit by digit."""
    if lo is not None and hi is not None and hi - lo <= _MAX_RANGE:
        return "(" + "|".join(str(k).replace("-", "\\-") for k in range(lo, hi + 1)) + ")"
    parts = []
    if hi is None or hi >= 0:  # the non-negative part [max(lo, 0), hi]
        parts.append(_naturals(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:  # the negative part: −x with x in [max(1, −hi), −lo]
        low_magnitude = 1 if hi is None or hi >= 0 else -hi
        parts.append("\\-" + _naturals(low_magnitude, None if lo is None else -lo))
    return "(" + "|".join(parts) + ")"


def _naturals(a: int, b: int | None) -> str:
    """Decimal naturals (no leading zeros) in [a, b]; b None is unbounded."""
    top = str(b) if b is not None else None
    parts = []
    for length in range(len(str(a)), (len(top) if top is not None else len(str(a))) + 1):
        lo = max(a, 10 ** (length - 1) if length > 1 else 0)
        hi = 10**length - 1 if b is None else min(b, 10**length - 1)
        if lo <= hi:
            parts += _same_length(str(lo), str(hi))
    if b is None:  # every number with more digits than a
        parts.append(f"[1-9][0-9]{{{len(str(a))},}}")
    return "(" + "|".join(parts) + ")"


def _same_length(lo: str, hi: str) -> list[str]:
    """Patterns for the digit strings of one length from lo to hi (lo <= hi, equal lengths)."""
    if lo == hi:
        return [lo]
    if lo[0] == hi[0]:
        return [lo[0] + p for p in _same_length(lo[1:], hi[1:])]
    n, out = len(lo) - 1, []
    first, last = int(lo[0]), int(hi[0])
    if lo[1:] != "0" * n:  # lo's leading digit covers only lo[1:] .. 9…9
        out += [lo[0] + p for p in _same_length(lo[1:], "9" * n)]
        first += 1
    if hi[1:] != "9" * n:
        last -= 1
    if first <= last:
        out.append((str(first) if first == last else f"[{first}-{last}]") + "[0-9]" * n)
    if hi[1:] != "9" * n:
        out += [hi[0] + p for p in _same_length("0" * n, hi[1:])]
    return out


_ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
                "readOnly", "writeOnly"}  # fmt: skip
_KEYWORDS = {
    "integer": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
    "number": set(),
    "boolean": set(),
    "null": set(),
    "string": {"pattern", "minLength", "maxLength"},
    "array": {"items", "minItems", "maxItems"},
    "object": {"properties", "required", "additionalProperties"},
}


def _check_keywords(schema: dict, kind: str, path: str) -> None:
    extra = set(schema) - _ANNOTATIONS - {"type"} - _KEYWORDS[kind]
    if extra:
        raise InputError(
            f"{path}: keyword {sorted(extra)[0]!r} is not supported on type {kind!r} (it would not be "
            f"enforced); supported there: {sorted(_KEYWORDS[kind]) or 'none'}"
        )


def _split_types(schema: dict, kinds: list, path: str) -> list[dict]:
    """One schema per listed type, each keeping the keywords of its own type (a keyword of none of them
    is refused)."""
    for k in kinds:
        if not isinstance(k, str) or k not in _KEYWORDS:
            raise InputError(f"{path}: unsupported 'type' {k!r}; known: {sorted(_KEYWORDS)}")
    allowed = set().union(*(_KEYWORDS[k] for k in kinds))
    extra = set(schema) - _ANNOTATIONS - {"type"} - allowed
    if extra:
        raise InputError(f"{path}: keyword {sorted(extra)[0]!r} is not supported on types {kinds}")
    return [{key: v for key, v in schema.items() if key in _KEYWORDS[k]} | {"type": k} for k in kinds]


def _number(schema: dict, key: str, path: str) -> float | None:
    value = schema.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise InputError(f"{path}.{key} must be a number, got {value!r}")
    return value


def _count(schema: dict, key: str, path: str) -> int | None:
    value = schema.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{path}.{key} must be a non-negative integer, got {value!r}")
    if value > _MAX_REPEAT:  # the regex compiler's repetition limit: name the schema keyword, not the regex
        raise InputError(f"{path}.{key} must be at most {_MAX_REPEAT}, got {value}")
    return value


def _integer_bounds(schema: dict, path: str) -> tuple[int | None, int | None]:
    import math

    lows = [math.ceil(v) for v in [_number(schema, "minimum", path)] if v is not None]
    lows += [math.floor(v) + 1 for v in [_number(schema, "exclusiveMinimum", path)] if v is not None]
    highs = [math.floor(v) for v in [_number(schema, "maximum", path)] if v is not None]
    highs += [math.ceil(v) - 1 for v in [_number(schema, "exclusiveMaximum", path)] if v is not None]
    lo, hi = (max(lows) if lows else None), (min(highs) if highs else None)
    if lo is not None and hi is not None and lo > hi:
        raise InputError(f"{path}: no integer satisfies the bounds (minimum {lo} > maximum {hi})")
    return lo, hi


def _check_pattern(pat: str, path: str) -> None:
    """A JSON string holds no raw quote, backslash or control character: refuse a pattern that could."""
    from dlm_constrain.regex import compile_regex

    forbidden = '"\\' + "".join(chr(c) for c in range(32))
    dfa = compile_regex(pat, frozenset(forbidden) | frozenset(chr(c) for c in range(32, 127)))
    cols = [dfa.index(c) for c in forbidden]
    live = [q for q in range(dfa.num_states) if q != dfa.dead]
    if any(int(dfa.delta[q, a]) != dfa.dead for q in live for a in cols):
        raise InputError(
            f"{path}.pattern {pat!r} can match a quote, a backslash or a control character, which a JSON "
            'string cannot hold unescaped; exclude them (e.g. [^"\\\\] instead of .)'
        )


def schema_to_regex(schema: Any, path: str = "schema") -> str:
    """A regex whose full matches are exactly the compact JSON texts valid under ``schema``."""
    if schema is True or schema == {}:
        raise InputError(f"{path}: an unrestricted value is not supported; give a 'type'")
    if not isinstance(schema, dict):
        raise InputError(f"{path} must be an object, got {type(schema).__name__}")
    if "const" in schema:
        return _literal(schema["const"])
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise InputError(f"{path}.enum must be a non-empty list")
        return "(" + "|".join(_literal(v) for v in values) + ")"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            subs = schema[key]
            if not isinstance(subs, list) or not subs:
                raise InputError(f"{path}.{key} must be a non-empty list")
            return "(" + "|".join(schema_to_regex(s, f"{path}.{key}[{i}]") for i, s in enumerate(subs)) + ")"
    kind = schema.get("type")
    if isinstance(kind, list):
        if not kind:
            raise InputError(f"{path}.type must be a type name or a non-empty list of them")
        return "(" + "|".join(schema_to_regex(sub, path) for sub in _split_types(schema, kind, path)) + ")"
    if not isinstance(kind, str) or kind not in _KEYWORDS:
        raise InputError(f"{path}: unsupported or missing 'type' {kind!r}; known: {sorted(_KEYWORDS)}")
    _check_keywords(schema, kind, path)
    if kind == "boolean":
        return "(true|false)"
    if kind == "null":
        return "null"
    if kind == "integer":
        lo, hi = _integer_bounds(schema, path)
        return _INT if lo is None and hi is None else _int_range(lo, hi)
    if kind == "number":
        return _NUMBER
    if kind == "string":
        if "pattern" in schema:
            pat = schema["pattern"]
            if not isinstance(pat, str):
                raise InputError(f"{path}.pattern must be a string")
            if "minLength" in schema or "maxLength" in schema:
                raise InputError(f"{path}: pattern together with minLength/maxLength is not supported")
            pat = pat.removeprefix("^").removesuffix("$")
            _check_pattern(pat, path)
            return '"(' + pat + ')"'
        lo = _count(schema, "minLength", path) or 0
        hi = _count(schema, "maxLength", path)
        if hi is not None and hi < lo:
            raise InputError(f"{path}: maxLength {hi} < minLength {lo}")
        rep = f"{{{lo},{'' if hi is None else hi}}}"
        return '"' + _STRING_CHAR + rep + '"'
    if kind == "array":
        item = schema_to_regex(schema.get("items", {}), f"{path}.items")
        lo = _count(schema, "minItems", path) or 0
        hi = _count(schema, "maxItems", path)
        if hi is not None and hi < lo:
            raise InputError(f"{path}: maxItems {hi} < minItems {lo}")
        if hi == 0:
            return r"\[\]"
        more_hi = "" if hi is None else str(hi - 1)
        body = f"{item}(,{item}){{{max(lo - 1, 0)},{more_hi}}}"
        return r"\[" + (f"({body})?" if lo == 0 else body) + r"\]"
    if kind == "object":
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise InputError(f"{path}.properties must be an object")
        required = schema.get("required", list(props))
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise InputError(f"{path}.required must be a list of property names, got {required!r}")
        required = set(required)
        unknown = required - set(props)
        if unknown:
            raise InputError(f"{path}.required names unknown properties {sorted(unknown)}")
        return r"\{" + _object_body(list(props.items()), required, path, first=True) + r"\}"
    raise AssertionError(kind)  # every type of _KEYWORDS is handled above


def _object_body(items: list[tuple[str, Any]], required: set[str], path: str, first: bool) -> str:
    """Properties in order; an optional property may be skipped (commas placed correctly)."""
    if not items:
        return ""
    (name, sub), rest = items[0], items[1:]
    member = _literal(name) + ":" + schema_to_regex(sub, f"{path}.properties.{name}")
    sep = "" if first else ","
    with_it = sep + member + _object_body(rest, required, path, first=False)
    if name in required:
        return with_it
    without = _object_body(rest, required, path, first=first)
    return f"({with_it}|{without})" if without else f"({with_it})?"


def is_valid_json_for(schema: Any, text: str) -> bool:
    """Check ``text`` against ``schema`` with Python's own regex engine (an independent cross-check)."""
    return re.fullmatch(schema_to_regex(schema), text) is not None
