"""JSON schema -> regular expression for compact JSON (no whitespace, properties in schema order).

Supported: ``type`` object (``properties``, ``required``; all listed properties are emitted in order,
optional ones may be left out), string (``enum``, ``const``, ``pattern``, ``minLength``/``maxLength``),
integer (``minimum``/``maximum`` for small ranges, else any integer), number, boolean, null, array
(``items``, ``minItems``/``maxItems``), ``enum``/``const`` of any scalar, ``anyOf``/``oneOf`` (as
alternation).  Anything else raises :class:`~papershelf.errors.InputError`.

>>> schema_to_regex({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
'\\\\{"ok":(true|false)\\\\}'
"""

from __future__ import annotations

import json
import re
from typing import Any

from papershelf.errors import InputError

_STRING_CHAR = r'[^"\\\x00-\x1f]'
_INT = r"-?(0|[1-9][0-9]*)"
_NUMBER = _INT + r"(\.[0-9]+)?([eE][+-]?[0-9]+)?"
_MAX_RANGE = 2000


def _escape(text: str) -> str:
    return "".join("\\" + c if c in "\\.[]{}()*+?|^$-" else c for c in text)


def _literal(value: Any) -> str:
    return _escape(json.dumps(value, separators=(",", ":")))


def _int_range(lo: int, hi: int) -> str:
    if hi - lo > _MAX_RANGE:
        raise InputError(f"integer range [{lo}, {hi}] is too wide for an enumerated regex (> {_MAX_RANGE})")
    return "(" + "|".join(str(k).replace("-", "\\-") for k in range(lo, hi + 1)) + ")"


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
        return "(" + "|".join(schema_to_regex({**schema, "type": k}, path) for k in kind) + ")"
    if kind == "boolean":
        return "(true|false)"
    if kind == "null":
        return "null"
    if kind == "integer":
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if lo is not None and hi is not None:
            return _int_range(int(lo), int(hi))
        return _INT
    if kind == "number":
        return _NUMBER
    if kind == "string":
        if "pattern" in schema:
            pat = schema["pattern"]
            if not isinstance(pat, str):
                raise InputError(f"{path}.pattern must be a string")
            return '"(' + pat.removeprefix("^").removesuffix("$") + ')"'
        lo = int(schema.get("minLength", 0))
        hi = schema.get("maxLength")
        rep = f"{{{lo},{'' if hi is None else int(hi)}}}"
        return '"' + _STRING_CHAR + rep + '"'
    if kind == "array":
        item = schema_to_regex(schema.get("items", {}), f"{path}.items")
        lo = int(schema.get("minItems", 0))
        hi = schema.get("maxItems")
        if hi is not None and int(hi) == 0:
            return r"\[\]"
        more_hi = "" if hi is None else str(int(hi) - 1)
        body = f"{item}(,{item}){{{max(lo - 1, 0)},{more_hi}}}"
        return r"\[" + (f"({body})?" if lo == 0 else body) + r"\]"
    if kind == "object":
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise InputError(f"{path}.properties must be an object")
        required = set(schema.get("required", list(props)))
        unknown = required - set(props)
        if unknown:
            raise InputError(f"{path}.required names unknown properties {sorted(unknown)}")
        return r"\{" + _object_body(list(props.items()), required, path, first=True) + r"\}"
    raise InputError(f"{path}: unsupported or missing 'type' {kind!r}")


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
