"""Checking that parsed JSON is a result file every reader can trust, before any reader runs.

Owns `validate`: the schema tag, then the whole file against the shape of `pytest-latency/1`
(docs/result-schema.md, "What is checked at load"), in one pass: the type of every field merge,
compare and the report read, the caps on nesting and numbers, and every HDR blob decoding
within the bounds `histogram` puts on it. A field an older file lacks may be absent (readers
default it); a field that is present has its type; fields this version does not know are any
JSON within the caps (a reader ignores them, merge passes them on). Any problem is one
`ResultError` line naming the file and the field. May import `histogram` and its sibling
`_schema`; stdlib otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, NoReturn

from pytest_latency.histogram import MAX_TOTAL_COUNT, LatencyHistogram
from pytest_latency.results._schema import SCHEMA, ResultError, ResultFile

# Nesting under any field: real files nest 4 levels under a test (`what_ifs.e2e.fan_out[0].k`).
# The cap keeps every recursive reader (this check, the report's evidence, json.dumps in merge)
# far from Python's recursion limit.
MAX_DEPTH: Final = 32
# Every number fits a signed 64-bit integer (what most JSON readers hold), and is finite (Python
# parses 1e400 as inf).
MAX_NUMBER: Final = 2**63 - 1

# A field's place, built only when a message needs it: (parent, key or index), or the root "".
_Path = tuple[Any, str | int] | str
_Check = Callable[[Any, _Path], None]
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Bad(Exception):
    def __init__(self, path: _Path, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem


def _render(path: _Path) -> str:
    parts: list[str] = []
    while not isinstance(path, str):
        path, key = path
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif _IDENTIFIER.fullmatch(key):
            parts.append(f".{key}")
        else:  # a group key, or any key from the file: quoted, escaped, short
            shown = key if len(key) <= 60 else key[:57] + "..."
            parts.append(f"[{shown!r}]")
    return (path + "".join(reversed(parts))).lstrip(".")


_KINDS: Final = {
    type(None): "null",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "an object",
}


def _fail(path: _Path, expected: str, value: Any) -> NoReturn:
    raise _Bad(path, f"expected {expected}, got {_KINDS.get(type(value), type(value).__name__)}")


# ---- the checks ------------------------------------------------------------------------------


def _any(value: Any, path: _Path, depth: int = 0) -> None:
    """Any JSON value within the caps (what `dict[str, Any]` fields and unknown fields hold)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return
    if kind is int or kind is float:
        _num(value, path)
    elif depth >= MAX_DEPTH:
        raise _Bad(path, f"nested more than {MAX_DEPTH} levels deep")
    elif kind is dict:
        for key, item in value.items():
            _any(item, (path, key), depth + 1)
    elif kind is list:
        for index, item in enumerate(value):
            _any(item, (path, index), depth + 1)


def _num(value: Any, path: _Path) -> None:
    kind = type(value)
    # The range test also refuses inf and NaN (every comparison with NaN is false).
    if (kind is float or kind is int) and -MAX_NUMBER <= value <= MAX_NUMBER:
        return
    if kind is float or kind is int:
        raise _Bad(path, f"number out of range (not finite, or beyond ±{MAX_NUMBER})")
    _fail(path, "a number", value)


def _int(value: Any, path: _Path) -> None:
    if type(value) is not int:
        _fail(path, "an integer", value)
    _num(value, path)


def _count(value: Any, path: _Path) -> None:
    """A count of calls, values, tokens or tests: 0 .. histogram.MAX_TOTAL_COUNT."""
    if type(value) is not int:
        _fail(path, "an integer", value)
    if not 0 <= value <= MAX_TOTAL_COUNT:
        raise _Bad(path, f"count {value} out of range (0 .. {MAX_TOTAL_COUNT})")


def _str(value: Any, path: _Path) -> None:
    if type(value) is not str:
        _fail(path, "a string", value)


def _bool(value: Any, path: _Path) -> None:
    if type(value) is not bool:
        _fail(path, "a boolean", value)


def _hdr(value: Any, path: _Path) -> None:
    if type(value) is not str:
        _fail(path, "an HdrHistogram V2 blob (a string)", value)
    try:
        LatencyHistogram.decode(value)
    except ValueError as exc:
        raise _Bad(path, str(exc)) from None


def _nullable(check: _Check) -> _Check:
    def nullable(value: Any, path: _Path) -> None:
        if value is not None:
            check(value, path)

    return nullable


def _one_of(*words: str) -> _Check:
    def one_of(value: Any, path: _Path) -> None:
        if value not in words or type(value) is not str:
            raise _Bad(path, f"expected one of {', '.join(words)}")

    return one_of


def _list(item: _Check) -> _Check:
    def list_of(value: Any, path: _Path) -> None:
        if type(value) is not list:
            _fail(path, "a list", value)
        for index, element in enumerate(value):
            item(element, (path, index))

    return list_of


def _row(*columns: _Check) -> _Check:
    """A list read by position (a timeline call, a prefill point): at least these columns."""

    def row(value: Any, path: _Path) -> None:
        if type(value) is not list or len(value) < len(columns):
            raise _Bad(path, f"expected a list of {len(columns)} values")
        for index, element in enumerate(value):
            (columns[index] if index < len(columns) else _any)(element, (path, index))

    return row


def _map(item: _Check) -> _Check:
    def map_of(value: Any, path: _Path) -> None:
        if type(value) is not dict:
            _fail(path, "an object", value)
        for key, element in value.items():
            item(element, (path, key))

    return map_of


def _obj(fields: Mapping[str, _Check], required: tuple[str, ...] = ()) -> _Check:
    """An object with these fields; `required` ones must be there (readers index them), the
    others may be absent (an older file) but have their type when present."""

    def obj(value: Any, path: _Path) -> None:
        if type(value) is not dict:
            _fail(path, "an object", value)
        for key, element in value.items():
            check = fields.get(key)
            if check is None:
                _any(element, (path, key))
            else:
                check(element, (path, key))
        for key in required:
            if key not in value:
                raise _Bad((path, key), "missing")

    return obj


def _evidence(value: Any, path: _Path, depth: int = 0) -> None:
    """A finding's evidence: free-form numbers, words and lists, read by the report as it
    labels them (report/_diagnosis.evidence): `of` counts the calls, `calls_per_sample` holds
    numbers, and a `...pairs` list holds [call, call, overlap µs] rows."""
    if type(value) is not dict:
        _fail(path, "an object", value)
    if depth >= MAX_DEPTH:
        raise _Bad(path, f"nested more than {MAX_DEPTH} levels deep")
    for key, item in value.items():
        where = (path, key)
        if key == "of":
            _nullable(_int)(item, where)
        elif key == "calls_per_sample" and type(item) is dict:
            _STEPS(item, where)
        elif type(item) is dict:
            _evidence(item, where, depth + 1)
        elif "pairs" in key and type(item) is list:
            for index, pair in enumerate(item):
                if type(pair) is list and len(pair) >= 3:
                    _num(pair[2], ((where, index), 2))
                _any(pair, (where, index), depth + 2)
        else:
            _any(item, where, depth + 1)


_NUM: Final = _num
_OPT_NUM: Final = _nullable(_num)
_OPT_STR: Final = _nullable(_str)
_COUNTS: Final = _map(_count)
_STEPS: Final = _obj({k: _NUM for k in ("n", "min", "p50", "p95", "max", "mean")})
_FINDING: Final = _obj(
    {"kind": _str, "message": _str, "evidence": _evidence, "scope": _str, "shard": _count}
)
_EVIDENCE_FIELDS: Final[dict[str, _Check]] = {
    "kind": _one_of("quantile", "mean", "extreme", "proportion", "sum", "ratio", "nothing"),
    "n": _count,
    "hdr": _hdr,
    "total": _NUM,
    "squares": _NUM,
    "hits": _count,
    "excluded": _count,
    "unknown": _count,
    "unknown_models": _COUNTS,
    "policy": _str,
}
_EVIDENCE_OBJ: Final = _obj(_EVIDENCE_FIELDS, required=("kind", "n"))


def _evidence_block(value: Any, path: _Path) -> None:
    """A session budget's `evidence`: the fields its kind adds up (`evidence.Evidence`)."""
    _EVIDENCE_OBJ(value, path)
    needs = {
        "quantile": ("hdr",),
        "mean": ("total", "squares"),
        "extreme": ("total",),
        "sum": ("total",),
        "proportion": ("hits",),
        "ratio": ("hits", "total"),
    }.get(value["kind"], ())
    for key in needs:
        if key not in value:
            raise _Bad((path, key), f"missing (a {value['kind']} evidence needs it)")


_BUDGET: Final = _obj(
    {
        "expr": _str,
        "verdict": _str,
        "passed": _bool,
        "status": _one_of("pass", "fail", "inconclusive"),
        "estimate": _OPT_NUM,
        "interval": _nullable(_list(_OPT_NUM)),
        "n": _count,
        "message": _str,
        "metric": _str,
        "stat": _OPT_STR,
        "op": _str,
        "threshold": _NUM,
        "threshold_text": _str,
        "estimate_text": _OPT_STR,
        "interval_text": _OPT_STR,
        "excess": _OPT_NUM,
        "confident": _bool,
        "shard": _count,
        "shards": _count,
        "evidence": _evidence_block,
    },
    required=("expr",),
)
_OTEL: Final = _nullable(
    _obj(
        {"name": _str, "unit": _str, "scale": _NUM, "kind": _str, "attributes": _map(_str)},
    )
)
_STATS: Final = ("p50", "p90", "p95", "p99", "min", "max", "mean")
_BLOCK_FIELDS: Final[dict[str, _Check]] = {
    "unit": _str,
    "count": _count,
    **{k: _NUM for k in _STATS},
    "hdr": _hdr,
    "otel": _OTEL,
    "sum": _int,
    "out_of_range": _count,
}
_TEST_BLOCK: Final = _obj(_BLOCK_FIELDS, required=("count", *_STATS, "hdr"))
# A rollup's `sum` is what merge adds up (and `mean` comes from).
_ROLLUP_BLOCK: Final = _obj(_BLOCK_FIELDS, required=("count", *_STATS, "hdr", "sum"))
_RATIO_FIELDS: Final[dict[str, _Check]] = {
    "value": _OPT_NUM,
    "cache_fields": _str,
    "calls_reporting": _count,
    "read_tokens": _count,
    "input_tokens": _count,
}
# `cost` of a test, group or the session (`_blocks.cost_block`); absent in older files.
_COST_OBJ: Final = _obj(
    {
        "unit": _str,
        "total": _OPT_NUM,
        "cache_saved": _OPT_NUM,
        "cache_extra": _OPT_NUM,
        "net_saved": _OPT_NUM,
        "calls_priced": _count,
        "unpriced_models": _COUNTS,
        "calls_without_usage": _count,
    },
    required=("total", "calls_priced"),
)


def _cost_block(value: Any, path: _Path) -> None:
    """A `cost` block whose sums are null exactly when no call was priced (absent, never 0)."""
    _COST_OBJ(value, path)
    if (value["total"] is None) != (value["calls_priced"] == 0):
        raise _Bad((path, "total"), "must be null exactly when calls_priced is 0")


_HEDGE: Final = _obj(
    {
        "delay_percentile": _NUM,
        **{
            k: _OPT_NUM
            for k in (
                "delay",
                "p50",
                "p95",
                "p99",
                "baseline_p50",
                "baseline_p95",
                "baseline_p99",
                "extra_load",
            )
        },
        "n": _count,
    },
    required=("delay_percentile",),
)
_FAN_OUT: Final = _obj(
    {"k": _int, "p50": _OPT_NUM, "p99": _OPT_NUM, "p_any_over_p99": _OPT_NUM, "supported": _bool},
    required=("k",),
)
_WHAT_IF: Final = _obj(
    {
        "n": _count,
        "too_few": _bool,
        "needed": _count,
        "fan_out": _list(_FAN_OUT),
        "hedge": _list(_HEDGE),
    }
)
_LOAD: Final = _obj(
    {
        "concurrency": _nullable(_count),
        "rate_per_s": _OPT_NUM,
        "arrival": _nullable(_one_of("poisson", "constant")),
        "burstiness": _OPT_NUM,
        "seed": _nullable(_int),
        "in_flight_max": _nullable(_count),
        "schedule": _obj(
            {
                "samples": _count,
                "late_p50_us": _OPT_NUM,
                "late_max_us": _OPT_NUM,
                "slipped": _count,
                "threshold_us": _NUM,
            },
            required=("samples", "slipped"),
        ),
        "sweep": _str,
        "split": _obj({"shards": _count, "together": _bool}, required=("shards", "together")),
    },
    required=("concurrency", "rate_per_s"),
)
_TEST: Final = _obj(
    {
        "nodeid": _str,
        "outcome": _str,
        "location": _nullable(_row(_str, _nullable(_int))),
        "policy": _OPT_STR,
        **{
            k: _count
            for k in (
                "samples",
                "warmup",
                "call_count",
                "unsampled_call_count",
                "error_count",
                "retries",
            )
        },
        "calls_per_sample": _list(_count),
        "metrics": _map(_TEST_BLOCK),
        "cache_read_ratio": _obj(_RATIO_FIELDS),
        "cost": _cost_block,
        "usage_fields": _COUNTS,
        "phase": _obj(
            {
                "prefill_share": _OPT_NUM,
                "decode_share": _OPT_NUM,
                "n": _count,
                "leaning": _nullable(_str),
            }
        ),
        "concurrency": _nullable(
            _obj({"samples": _count, "median_calls": _NUM, "concurrency": _NUM, "parallel": _bool})
        ),
        "load": _LOAD,
        "budgets": _list(_BUDGET),
        "flags": _COUNTS,
        "flagged_count": _count,
        "errors": _COUNTS,
        "retried_errors": _COUNTS,
        "error_kinds": _map(
            _obj(
                {
                    "failed": _count,
                    "attempts": _count,
                    "retried": _count,
                    "recovered": _count,
                    "detail": _OPT_STR,
                }
            )
        ),
        "timeline": _obj(
            {
                "samples": _list(
                    _obj(
                        {
                            "sample": _int,
                            "calls": _list(_row(_NUM, _OPT_NUM, _NUM, _str, _OPT_STR)),
                        },
                        required=("sample", "calls"),
                    )
                ),
                "truncated": _bool,
            }
        ),
        "prefill": _nullable(
            _obj(
                {
                    "points": _list(_row(_NUM, _NUM, _any)),
                    "n": _count,
                    "slope_us_per_token": _OPT_NUM,
                    "intercept_us": _OPT_NUM,
                    "note": _str,
                }
            )
        ),
        "findings": _list(_FINDING),
        "what_ifs": _obj({"e2e": _WHAT_IF, "ttft": _WHAT_IF, "calls_per_sample": _STEPS}),
        "shard": _count,
        "regressions": _list(_str),
        "recorded": _COUNTS,
    },
    required=("nodeid", "metrics"),
)
# `baseline.regressions[]` and `improvements[]`: what `_compare.changes_of` reads back.
_CHANGE_FIGURES: Final = (
    "base_p50",
    "head_p50",
    "base_p95",
    "head_p95",
    "change_p50",
    "change_p95",
    "p_value",
)
_CHANGE: Final = _obj(
    {
        "nodeid": _str,
        "metric": _str,
        **{k: _OPT_NUM for k in (*_CHANGE_FIGURES, "p_adjusted")},
        "regression": _bool,
        "improvement": _bool,
        "scope": _one_of("test", "group", "session"),
        "n_base": _count,
        "n_head": _count,
        "message": _str,
        "shard": _count,
    },
    required=("nodeid", "metric", *_CHANGE_FIGURES, "regression", "improvement"),
)
# Merge indexes every counter of a rollup.
_ROLLUP_FIELDS: Final[dict[str, _Check]] = {
    "metrics": _map(_ROLLUP_BLOCK),
    "model": _str,
    "endpoint": _str,
    "tests": _count,
    "call_count": _count,
    "error_count": _count,
    "retries": _count,
    "errors": _COUNTS,
    "retried_errors": _COUNTS,
    "flags": _COUNTS,
    "flagged_count": _count,
    "cache_read_ratio": _obj(
        _RATIO_FIELDS, required=("calls_reporting", "read_tokens", "input_tokens")
    ),
    "cost": _cost_block,
    "findings": _list(_FINDING),
}
_ROLLUP_REQUIRED: Final = (
    "metrics",
    "tests",
    "call_count",
    "error_count",
    "retries",
    "cache_read_ratio",
)
_FILE: Final = _obj(
    {
        "schema": _str,
        "run": _obj(
            {
                "started": _OPT_STR,
                "duration_s": _OPT_NUM,
                "partial": _bool,
                "versions": _map(_str),
                "git": _nullable(
                    _obj({"commit": _OPT_STR, "branch": _OPT_STR, "dirty": _nullable(_bool)})
                ),
                "shards": _count,
                "prices": _nullable(
                    _obj(
                        {
                            "source": _str,
                            "version": _OPT_STR,
                            "snapshot": _str,
                            "overrides": _map(_str),
                        }
                    )
                ),
            }
        ),
        "metrics_info": _map(_obj({"unit": _str, "otel": _OTEL})),
        "tests": _list(_TEST),
        "groups": _map(_obj(_ROLLUP_FIELDS, required=_ROLLUP_REQUIRED)),
        "session": _obj({**_ROLLUP_FIELDS, "budgets": _list(_BUDGET)}, required=_ROLLUP_REQUIRED),
        "summary": _COUNTS,
        "baseline": _obj(
            {
                "path": _OPT_STR,
                "tolerance": _NUM,
                "significance": _NUM,
                "correction": _str,
                "min_values": _count,
                "compared": _count,
                "only_base": _count,
                "only_head": _count,
                "regressions": _list(_CHANGE),
                "improvements": _list(_CHANGE),
            }
        ),
    }
)


def check_tag(data: Any, name: str) -> None:
    """A `ResultError` unless `data` says it is a `pytest-latency/1` file with its four parts:
    the cheap check for files already loaded (merge), before `validate`'s full one at load."""
    if not isinstance(data, dict):
        raise ResultError(f"{name}: not a pytest-latency result file (expected a JSON object)")
    schema = data.get("schema")
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith("pytest-latency/"):
            raise ResultError(
                f"{name}: result schema {schema[:40]!r} is not supported by this version "
                f"(it reads {SCHEMA!r})"
            )
        scalar = schema is None or isinstance(schema, str | int | float)
        shown = repr(schema)[:60] if scalar else _KINDS.get(type(schema), "?")
        raise ResultError(f"{name}: not a pytest-latency result file (schema {shown})")
    for key, kind in (("run", dict), ("tests", list), ("groups", dict), ("session", dict)):
        if not isinstance(data.get(key), kind):
            raise ResultError(f"{name}: malformed result file: {key!r} missing or wrong type")


def validate(data: Any, name: str) -> ResultFile:
    """`data` as a result file, or a `ResultError` naming `name`, the field and what is wrong."""
    check_tag(data, name)
    try:
        _FILE(data, "")
    except _Bad as bad:
        raise ResultError(
            f"{name}: malformed result file: {_render(bad.path)}: {bad.problem}"
        ) from None
    return data  # type: ignore[no-any-return]


__all__ = ["MAX_DEPTH", "MAX_NUMBER", "check_tag", "validate"]
