"""Budget expressions: the one language of `@pytest.mark.latency(...)` and `budgets.toml`.

Owns the grammar (`ttft{model=m}.p95 < 400ms`, `cache_read_ratio > 50%`,
`good(ttft < 400ms, tpot < 50ms) >= 95%`), its parser, the frozen `Expectation` it produces, the
`BudgetError` every mistake becomes, and loading `budgets.toml` into a `BudgetFile`. Thresholds
are normalised here, at the edge, to the catalogue's base units: microseconds for time, 0..1 for
ratios, plain numbers for tokens and counts.

Stdlib only, plus `pytest_latency.catalogue` for the metric names. It must not import pytest
(the plugin turns `BudgetError` into a usage or collection error), the statistics, or anything
that measures. The parser is a hand-written scanner with one method per grammar rule; it never
uses `eval` and no regular expressions, so every error can point at the exact column.

Grammar (whitespace allowed between tokens)::

    expectation := good | metric_expectation
    metric_expectation := NAME [filters] ["." stat] op threshold
    good        := "good" [filters] "(" condition ("," condition)* [","] ")" op threshold
    condition   := NAME op threshold                       # a per-call metric, no stat
    filters     := "{" KEY "=" value ("," KEY "=" value)* [","] "}"    # KEY: model endpoint api
    value       := QUOTED | bare token (no space , = { } quotes)
    stat        := "min" | "max" | "mean" | "p" N              # 0 < N < 100, e.g. p99.9
    op          := "<" | "<=" | ">" | ">="
    threshold   := NUMBER [UNIT]      # ns us µs ms s | % | tok, as the metric's dimension allows
"""

from __future__ import annotations

import bisect
import codecs
import contextlib
import difflib
import fnmatch
import json
import math
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, NoReturn, TypeAlias

from pytest_latency.catalogue import METRICS, Dimension, MetricSpec, Scope

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on the 3.10 CI job only
    # mypy checks as 3.10 while the dev venv (3.11+) has no tomli installed.
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "FILTER_KEYS",
    "GOOD",
    "MAX_THRESHOLD",
    "OPS",
    "TIME_UNITS",
    "BudgetError",
    "BudgetFile",
    "BudgetRule",
    "Condition",
    "Defaults",
    "Expectation",
    "Op",
    "load_budget_file",
    "parse_budget_file",
    "parse_expectation",
]

Op = Literal["<", "<=", ">", ">="]
OPS: Final[tuple[Op, ...]] = ("<", "<=", ">", ">=")

# The pseudo-metric of goodput expressions. Deliberately not a catalogue entry: it is computed
# from other metrics per call, and the catalogue stays the list of things we measure.
GOOD: Final = "good"

FILTER_KEYS: Final = ("api", "endpoint", "model")

# Microseconds per unit. Both the micro sign (U+00B5, what keyboards type) and the Greek mu
# (U+03BC, what NFKC turns the micro sign into) are accepted, because they render identically.
TIME_UNITS: Final[Mapping[str, float]] = {
    "ns": 1e-3,
    "us": 1.0,
    "\u00b5s": 1.0,
    "\u03bcs": 1.0,
    "ms": 1e3,
    "s": 1e6,
}
_TIME_UNITS_SHOWN: Final = "ns, us, µs, ms, s"
_STATS_SHOWN: Final = "p50, p90, p95, p99, p99.9 (any pN with 0 < N < 100), min, max, mean"
_OPS_SHOWN: Final = "<, <=, >, >="

# Over ~11.6 days (in µs) or a trillion tokens no budget is meaningful: such a number is a typo
# (a missing unit, an extra exponent), and keeping thresholds small keeps float maths exact.
MAX_THRESHOLD: Final = 1e12
MAX_EXPRESSION_LENGTH: Final = 1000

# Names users reach for from other tools (anchors §0: ITL means two things across tools).
_METRIC_ALIASES: Final[Mapping[str, str]] = {
    "e2el": "e2e",
    "request_latency": "e2e",
    "latency": "e2e",
    "total": "e2e",
    "duration": "e2e",
    "inter_token_latency": "tpot (per call) or itl (per chunk)",
    "inter_chunk_latency": "itl",
    "icl": "itl",
    "time_to_first_token": "ttft",
    "goodput": "good(...)",
}
_STAT_ALIASES: Final[Mapping[str, str]] = {
    "median": "p50",
    "med": "p50",
    "avg": "mean",
    "average": "mean",
    "p100": "max",
    "p0": "min",
    "minimum": "min",
    "maximum": "max",
}
_OP_MISTAKES: Final[Mapping[str, str]] = {
    "==": "equality budgets are not supported; use <= or >=",
    "=": "equality budgets are not supported; use <= or >=",
    "!=": "inequality budgets are not supported; use <, <=, > or >=",
    "=<": "write <= instead of =<",
    "=>": "write >= instead of =>",
    "<>": "<> is not an operator; use <, <=, > or >=",
}
# Characters that look like ASCII syntax when pasted from documents, chat or slides.
_LOOKALIKES: Final[Mapping[str, str]] = {
    "\u2264": "<=",
    "\u2266": "<=",
    "\u2a7d": "<=",
    "\u2265": ">=",
    "\u2267": ">=",
    "\u2a7e": ">=",
    "\u2039": "<",
    "\u203a": ">",
    "\u2212": "-",
    "\u2013": "-",
    "\u2014": "-",
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u2024": ".",
    "\u00b7": ".",
    "\u201a": ",",
    "\u0430": "a",
    "\u0435": "e",
    "\u043e": "o",
    "\u0440": "p",
    "\u0441": "c",
    "\u0445": "x",
    "\u0443": "y",
    "\u0456": "i",
    "\u0455": "s",
    "\u03bf": "o",
    "\u03bd": "v",
    "\u03c4": "t",
}
_NAME_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NAME_CHARS: Final = _NAME_START | frozenset("0123456789")
_DIGITS: Final = frozenset("0123456789")
# A bare filter value ends at whitespace or at the filter's own punctuation.
_VALUE_STOP: Final = frozenset(",={}'\"")


class BudgetError(ValueError):
    """A budget expression or budget file that cannot be used.

    `str(error)` starts with one line naming the source, quoting the expression and saying what is
    wrong and what would be valid; when the column is known, it is followed by the expression with
    a caret under the bad part. `reason`, `source`, `text` and `column` (1-based) are attributes
    so callers can re-render it.
    """

    def __init__(
        self,
        reason: str,
        *,
        source: str = "",
        text: str | None = None,
        start: int | None = None,
        end: int | None = None,
    ) -> None:
        self.reason = reason
        self.source = source
        self.text = text
        self.start = start
        self.end = end
        super().__init__(self._render())

    @property
    def column(self) -> int | None:
        return None if self.start is None else self.start + 1

    def _render(self) -> str:
        head = f"{self.source}: " if self.source else ""
        if self.text is None:
            return f"{head}{self.reason}"
        where = f" (column {self.column})" if self.column is not None else ""
        line = f"{head}bad latency budget {_quote(self.text)}{where}: {self.reason}"
        if self.start is None:
            return line
        shown, offset = _window(self.text, self.start)
        width = max(1, min((self.end or self.start + 1) - self.start, len(shown) - offset))
        return f"{line}\n    {shown}\n    {' ' * offset}{'^' * width}"

    def __reduce__(self) -> tuple[Any, ...]:
        # The keyword-only constructor would not survive pickling (xdist, multiprocessing).
        return (_rebuild_error, (self.reason, self.source, self.text, self.start, self.end))


def _rebuild_error(
    reason: str, source: str, text: str | None, start: int | None, end: int | None
) -> BudgetError:
    return BudgetError(reason, source=source, text=text, start=start, end=end)


def _quote(text: str) -> str:
    shown = text if len(text) <= 120 else text[:117] + "..."
    return "'" + "".join(c if c.isprintable() else _escape(c) for c in shown) + "'"


def _escape(ch: str) -> str:
    return repr(ch)[1:-1]


def _window(text: str, start: int) -> tuple[str, int]:
    """The text one-to-one per character (so the caret lines up), cut to ~100 columns."""
    shown = "".join(c if c.isprintable() and not c.isspace() else " " for c in text)
    lo = max(0, start - 60)
    hi = min(len(shown), lo + 100)
    prefix = "..." if lo else ""
    suffix = "..." if hi < len(shown) else ""
    return prefix + shown[lo:hi] + suffix, start - lo + len(prefix)


def _describe_char(ch: str) -> str:
    name = unicodedata.name(ch, "control character")
    text = repr(ch) if not ch.isprintable() else f"'{ch}'"
    hint = _ascii_hint(ch)
    looks = f" (did you mean '{hint}'?)" if hint else ""
    return f"{text} (U+{ord(ch):04X} {name}){looks}"


def _ascii_hint(ch: str) -> str | None:
    if ch in _LOOKALIKES:
        return _LOOKALIKES[ch]
    normal = unicodedata.normalize("NFKC", ch)
    if normal != ch and normal.isascii() and normal.isprintable():
        return normal
    digit = unicodedata.digit(ch, None)
    return None if digit is None else str(digit)


@dataclass(frozen=True, slots=True)
class _Threshold:
    value: float  # base units
    unit: str  # as written, normalised: "ms", "µs", "%", "tok" or ""
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Condition:
    """One per-call condition inside `good(...)`, e.g. `ttft < 400ms`."""

    text: str = field(compare=False)
    metric: str
    op: Op
    threshold: float  # in the metric's base unit
    unit: str

    def holds(self, value: float) -> bool:
        return _compare(value, self.op, self.threshold)

    def format_value(self, value: float) -> str:
        return _format(value, METRICS[self.metric].dimension, self.unit)

    @property
    def label(self) -> str:
        return f"{self.metric} {self.op} {self.format_value(self.threshold)}"


@dataclass(frozen=True, slots=True)
class Expectation:
    """One parsed budget: `metric{filters}.stat op threshold`.

    `threshold` is in the metric's base unit (µs for time, 0..1 for ratios); `unit` is the unit
    the author wrote, used only to render values back in their terms. `stat` is None for
    aggregates and for `good(...)`; `percentile` is set only for `pN` stats. For goodput,
    `metric` is `"good"`, `conditions` holds the per-call conditions and the threshold is the
    required fraction of good calls. Equality is by meaning: `text` and `source` are kept for
    messages but not compared, so the same budget from two places is one budget.
    """

    text: str = field(compare=False)
    metric: str
    stat: str | None
    percentile: float | None
    op: Op
    threshold: float
    filters: tuple[tuple[str, str], ...] = ()
    conditions: tuple[Condition, ...] = ()
    source: str = field(default="", compare=False)
    unit: str = ""

    @property
    def dimension(self) -> Dimension:
        return Dimension.RATIO if self.metric == GOOD else METRICS[self.metric].dimension

    @property
    def is_goodput(self) -> bool:
        return self.metric == GOOD

    @property
    def label(self) -> str:
        """The left-hand side in canonical form: `ttft{model=x}.p95`, `good(ttft < 400 ms)`."""
        filters = ""
        if self.filters:
            filters = "{" + ",".join(f"{k}={_filter_value(v)}" for k, v in self.filters) + "}"
        if self.is_goodput:
            return f"{GOOD}{filters}(" + ", ".join(c.label for c in self.conditions) + ")"
        stat = f".{self.stat}" if self.stat else ""
        return f"{self.metric}{filters}{stat}"

    def holds(self, value: float) -> bool:
        """Whether an observed statistic (in base units) meets the budget."""
        return _compare(value, self.op, self.threshold)

    def good_call(self, values: Mapping[str, float]) -> bool:
        """Whether one call meets every `good(...)` condition.

        A condition on a metric the call does not have (the `tpot` of a one-token answer) does
        not make the call bad, as in vLLM's goodput. A failed call is never good: the caller
        counts it in the denominator without asking.
        """
        if not self.is_goodput:
            raise ValueError(f"{self.text!r} is not a good(...) expression")
        return all(c.holds(values[c.metric]) for c in self.conditions if c.metric in values)

    def format_value(self, value: float) -> str:
        """Render a base-unit value in this expression's unit: `612000.0` → `'612 ms'`."""
        return _format(value, self.dimension, self.unit)

    def describe(
        self,
        value: float,
        *,
        n: int | None = None,
        interval: tuple[float, float] | None = None,
    ) -> str:
        """`ttft.p95 = 612 ms > 400 ms (n=20)`: the observed value, how it compares, the budget.

        The operator shown is the true relation between the value and the threshold, so the
        same sentence reads right for a pass and a miss.
        """
        if math.isnan(value):
            relation = "?"
        else:
            relation = "<" if value < self.threshold else ">" if value > self.threshold else "="
        parts = []
        if n is not None:
            parts.append(f"n={n}")
        if interval is not None:
            lo, hi = interval
            lo_s = "-∞" if lo == -math.inf else self.format_value(lo)
            hi_s = "∞" if hi == math.inf else self.format_value(hi)
            parts.append(f"interval {lo_s} .. {hi_s}")
        tail = f" ({', '.join(parts)})" if parts else ""
        shown, limit = self.format_value(value), self.format_value(self.threshold)
        return f"{self.label} = {shown} {relation} {limit}{tail}"


def _compare(value: float, op: Op, threshold: float) -> bool:
    if op == "<":
        return value < threshold
    if op == "<=":
        return value <= threshold
    if op == ">":
        return value > threshold
    return value >= threshold


def _format(value: float, dimension: Dimension, unit: str) -> str:
    if math.isnan(value):
        return "nan"
    if dimension is Dimension.TIME:
        return f"{_number(value / TIME_UNITS[unit])} {unit}"
    if dimension is Dimension.RATIO:
        return f"{_number(value * 100)}%" if unit == "%" else _number(value)
    if unit:
        return f"{_number(value)} {unit}"
    return _number(value)


def _number(x: float) -> str:
    """About three significant digits, never in exponent form: 612, 41.5, 0.42, 1234."""
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    ax = abs(x)
    if ax >= 100 or ax == 0:
        return f"{x:.0f}"
    text = f"{x:.1f}" if ax >= 10 else f"{x:.2f}" if ax >= 1 else f"{x:.3g}"
    if "e" in text:  # tiny values: keep them readable rather than exact
        text = f"{x:.6f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _filter_value(value: str) -> str:
    bare = all(c.isascii() and c.isprintable() and not c.isspace() for c in value)
    if value and bare and not any(c in _VALUE_STOP for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_expectation(text: str, *, source: str) -> Expectation:
    """Parse one budget expression; raise `BudgetError` naming `source` on any mistake.

    `source` says where the text came from, for the message: `"test_x.py::test_a marker"`,
    `"budgets.toml:12"`.
    """
    if not isinstance(text, str):
        raise BudgetError(
            f"a budget expression must be a string like 'ttft.p95 < 400ms', "
            f"got {type(text).__name__} {text!r:.80}",
            source=source,
        )
    return _Parser(text, source).expectation()


class _Parser:
    """Recursive descent over the characters of one expression; `pos` is the cursor."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.pos = 0

    # -- scanning helpers --------------------------------------------------------------------

    def fail(self, reason: str, start: int | None = None, end: int | None = None) -> NoReturn:
        raise BudgetError(reason, source=self.source, text=self.text, start=start, end=end)

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def unexpected(self, expected: str) -> NoReturn:
        ch = self.peek()
        if not ch:
            self.fail(f"expected {expected}, but the expression ends here", self.pos)
        if not ch.isascii():
            self.fail(
                f"unexpected character {_describe_char(ch)}; budget expressions are ASCII "
                "(apart from µ in µs)",
                self.pos,
            )
        if not ch.isprintable():
            self.fail(f"unexpected control character {_describe_char(ch)}", self.pos)
        self.fail(f"expected {expected}, found {self.token_at(self.pos)!r}", self.pos)

    def token_at(self, start: int) -> str:
        """The printable run starting at `start`, for quoting in messages."""
        end = start
        while end < len(self.text) and not self.text[end].isspace() and end - start < 20:
            end += 1
        return self.text[start:end]

    def name(self, what: str) -> tuple[str, int]:
        self.skip_ws()
        start = self.pos
        if not self.peek() or self.peek() not in _NAME_START:
            self.unexpected(what)
        while self.peek() and self.peek() in _NAME_CHARS:
            self.pos += 1
        nxt = self.peek()
        if nxt and not nxt.isascii() and (nxt.isalnum() or nxt in _LOOKALIKES):
            self.unexpected(what)
        return self.text[start : self.pos], start

    # -- grammar rules -----------------------------------------------------------------------

    def expectation(self) -> Expectation:
        if len(self.text) > MAX_EXPRESSION_LENGTH:
            self.fail(
                f"expression is {len(self.text)} characters; the limit is {MAX_EXPRESSION_LENGTH}"
            )
        if not self.text.strip():
            self.fail(
                "empty expression; write one like 'ttft.p95 < 400ms' "
                f"(metrics: {', '.join(METRICS)})",
            )
        name, start = self.name("a metric name")
        if name == GOOD:
            return self.goodput(start)
        spec = self.metric(name, start)
        filters = self.filters()
        stat, percentile = self.stat(spec)
        op = self.op()
        threshold = self.threshold(spec.dimension, spec.name, op)
        self.end()
        return Expectation(
            text=self.text.strip(),
            metric=spec.name,
            stat=stat,
            percentile=percentile,
            op=op,
            threshold=threshold.value,
            filters=filters,
            source=self.source,
            unit=threshold.unit,
        )

    def metric(self, name: str, start: int) -> MetricSpec:
        spec = METRICS.get(name)
        if spec is not None:
            return spec
        end = start + len(name)
        if name.lower() in METRICS:
            self.fail(f"metric names are lower case: did you mean '{name.lower()}'?", start, end)
        alias = _METRIC_ALIASES.get(name.lower())
        close = difflib.get_close_matches(name.lower(), [*METRICS, GOOD], n=3, cutoff=0.6)
        hint = f"did you mean {alias}? " if alias else ""
        if not alias and close:
            hint = f"did you mean {' or '.join(repr(c) for c in close)}? "
        self.fail(
            f"unknown metric {name!r}; {hint}valid metrics: {', '.join(METRICS)}, "
            f"and {GOOD}(...) for goodput",
            start,
            end,
        )

    def filters(self) -> tuple[tuple[str, str], ...]:
        self.skip_ws()
        if self.peek() != "{":
            return ()
        open_at = self.pos
        self.pos += 1
        seen: dict[str, str] = {}
        while True:
            self.skip_ws()
            if self.peek() == "}":
                if not seen:
                    self.fail(
                        "empty filter {}; write e.g. {model=claude-haiku-4-5} "
                        f"(keys: {', '.join(FILTER_KEYS)})",
                        open_at,
                        self.pos + 1,
                    )
                self.pos += 1
                return tuple(sorted(seen.items()))
            key, key_at = self.name(f"a filter key ({', '.join(FILTER_KEYS)})")
            if key not in FILTER_KEYS:
                close = difflib.get_close_matches(key.lower(), FILTER_KEYS, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                self.fail(
                    f"unknown filter key {key!r}; {hint}valid keys: {', '.join(FILTER_KEYS)}",
                    key_at,
                    key_at + len(key),
                )
            if key in seen:
                self.fail(f"filter key {key!r} given twice", key_at, key_at + len(key))
            self.skip_ws()
            if self.peek() == ":":  # k6 writes {type:API}
                self.fail(f"write {key}=value, not {key}:value", self.pos)
            if self.peek() != "=":
                self.unexpected(f"'=' after filter key {key!r}")
            self.pos += 1
            seen[key] = self.filter_value(key)
            self.skip_ws()
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "}":
                self.unexpected("',' or '}' in the filter")

    def filter_value(self, key: str) -> str:
        self.skip_ws()
        start = self.pos
        quote = self.peek()
        if quote in ("'", '"'):
            self.pos += 1
            chars: list[str] = []
            while True:
                ch = self.peek()
                if not ch:
                    self.fail(f"unterminated quoted value for {key!r}", start)
                self.pos += 1
                if ch == quote:
                    break
                if ch == "\\" and self.peek() in (quote, "\\"):
                    ch = self.peek()
                    self.pos += 1
                chars.append(ch)
            value = "".join(chars)
            if not value.strip():
                self.fail(f"empty value for filter {key!r}", start, self.pos)
            return value
        while self.peek() and not self.peek().isspace() and self.peek() not in _VALUE_STOP:
            ch = self.peek()
            if not ch.isascii() or not ch.isprintable():
                self.unexpected(f"a value for filter {key!r}")
            self.pos += 1
        if self.pos == start:
            self.unexpected(f"a value for filter {key!r} (a bare token or a quoted string)")
        return self.text[start : self.pos]

    def stat(self, spec: MetricSpec) -> tuple[str | None, float | None]:
        self.skip_ws()
        if self.peek() != ".":
            if spec.takes_stat:
                self.fail(
                    f"{spec.name} is a distribution (one value per {spec.scope.value}) and needs "
                    f"a statistic, e.g. '{spec.name}.p95'; valid statistics: {_STATS_SHOWN}",
                    self.pos,
                )
            return None, None
        dot = self.pos
        self.pos += 1
        if not spec.takes_stat:
            self.fail(
                f"{spec.name} is an aggregate over calls and takes no statistic; "
                f"write it bare, e.g. '{spec.name} {_example_tail(spec)}'",
                dot,
            )
        name, start = self.name(f"a statistic ({_STATS_SHOWN})")
        if name in ("min", "max", "mean"):
            stat = name
            percentile = None
        elif name[0] == "p" and len(name) > 1 and all(c in _DIGITS for c in name[1:]):
            digits = name[1:]
            if self.peek() == "." and self.peek(1) in _DIGITS and self.peek(1):
                self.pos += 1
                while self.peek() and self.peek() in _DIGITS:
                    self.pos += 1
                digits = self.text[start + 1 : self.pos]
            stat = "p" + digits
            percentile = self.percentile(stat, start)
        else:
            if self.peek() == "(":  # k6 writes p(95)
                self.fail("write percentiles as p95 or p99.9, not p(95)", start)
            end = start + len(name)
            alias = _STAT_ALIASES.get(name.lower())
            close = difflib.get_close_matches(name.lower(), ["min", "max", "mean"], n=1)
            hint = f"did you mean {alias!r}? " if alias else ""
            if not hint and close:
                hint = f"did you mean {close[0]!r}? "
            if not hint and name[0] in "pP" and name[1:].isdigit():
                hint = f"did you mean 'p{name[1:]}'? "
            self.fail(
                f"unknown statistic {name!r}; {hint}valid statistics: {_STATS_SHOWN}", start, end
            )
        self.skip_ws()
        if self.peek() == "{":
            self.fail(
                f"filters go before the statistic: '{spec.name}{{...}}.{stat}'",
                self.pos,
            )
        return stat, percentile

    def percentile(self, stat: str, start: int) -> float:
        end = start + len(stat)
        digits = stat[1:]
        whole = digits.split(".")[0]
        if len(whole) > 1 and whole[0] == "0":
            self.fail(f"write {stat} without leading zeros (p5, p0.5)", start, end)
        value = float(digits)
        if value == 0:
            self.fail("p0 is the minimum: write 'min'", start, end)
        if value == 100:
            self.fail("p100 is the maximum: write 'max'", start, end)
        if not 0 < value < 100:
            self.fail(f"percentile {stat} is out of range; use pN with 0 < N < 100", start, end)
        return value

    def op(self) -> Op:
        self.skip_ws()
        start = self.pos
        two = self.text[start : start + 2]
        for mistake, message in _OP_MISTAKES.items():
            if two.startswith(mistake) and not (mistake == "=" and two in ("=<", "=>")):
                self.fail(message, start, start + len(mistake))
        if two in ("<=", ">="):
            self.pos += 2
            return "<=" if two == "<=" else ">="
        ch = self.peek()
        if ch in ("<", ">"):
            self.pos += 1
            return "<" if ch == "<" else ">"
        if ch and (ch.isalnum() or ch == "-"):
            self.fail(
                f"missing comparison operator before {self.token_at(start)!r}; "
                f"valid operators: {_OPS_SHOWN}",
                start,
            )
        self.unexpected(f"a comparison operator ({_OPS_SHOWN})")

    def number(self) -> tuple[float, int]:
        self.skip_ws()
        start = self.pos
        ch = self.peek()
        if ch == "-":
            self.fail("thresholds cannot be negative", start)
        if ch == "+":
            self.fail("write the threshold without a sign", start)
        if ch and ch in _NAME_START:
            word, _ = self.name("a number")
            if word.lower().startswith(("nan", "inf")):
                self.fail(f"the threshold must be a finite number, not {word!r}", start, self.pos)
            self.fail(f"expected a number, found {word!r}", start, self.pos)
        while self.peek() and self.peek() in _DIGITS:
            self.pos += 1
        int_digits = self.pos - start
        if self.peek() == ".":
            self.pos += 1
            frac_start = self.pos
            while self.peek() and self.peek() in _DIGITS:
                self.pos += 1
            if self.pos == frac_start:
                self.fail("expected digits after the decimal point", start, self.pos)
        elif int_digits == 0:
            self.unexpected("a number")
        if self.peek() in ("e", "E") and self.peek():
            exp_at = self.pos
            self.pos += 1
            if self.peek() in ("+", "-") and self.peek():
                self.pos += 1
            digits_at = self.pos
            while self.peek() and self.peek() in _DIGITS:
                self.pos += 1
            if self.pos == digits_at:
                self.fail("malformed exponent; write e.g. 1e3", exp_at, self.pos)
        if self.peek() == "_":
            self.fail("digit separators are not supported; write 1000, not 1_000", self.pos)
        if self.peek() == "," and self.peek(1) and self.peek(1) in _DIGITS:
            self.fail("write a decimal point, not a comma, and no thousands separators", self.pos)
        value = float(self.text[start : self.pos])
        if not math.isfinite(value):
            self.fail("the threshold is too large to be a number", start, self.pos)
        return value, start

    def unit(self) -> tuple[str, int]:
        # "400 ms" reads naturally, so whitespace may separate a number from its unit.
        self.skip_ws()
        start = self.pos
        if self.peek() == "%":
            self.pos += 1
            return "%", start
        while self.peek() and (self.peek() in _NAME_CHARS or self.peek() in "\u00b5\u03bc"):
            self.pos += 1
        ch = self.peek()
        if self.pos == start and ch and not (ch.isascii() and ch.isprintable()):
            self.unexpected("a unit or the end of the expression")
        return self.text[start : self.pos], start

    def threshold(self, dimension: Dimension, what: str, op: Op) -> _Threshold:
        value, start = self.number()
        number_end = self.pos
        unit, unit_at = self.unit()
        end = self.pos
        base, unit = self.convert(value, unit, unit_at, dimension, what, (start, number_end))
        if abs(base) > MAX_THRESHOLD:
            cap = "1e12 µs (about 11.6 days)" if dimension is Dimension.TIME else "1e12"
            self.fail(f"threshold is absurdly large (over {cap}); check the unit", start, end)
        if op == "<" and base == 0:
            self.fail(f"'{what} < 0' can never hold: values are never negative", start, end)
        if dimension is Dimension.RATIO and op == ">" and base == 1:
            self.fail(f"'{what} > 100%' can never hold: a ratio is at most 1", start, end)
        return _Threshold(base, unit, start, end)

    def convert(
        self,
        value: float,
        unit: str,
        unit_at: int,
        dimension: Dimension,
        what: str,
        number: tuple[int, int],
    ) -> tuple[float, str]:
        unit_end = unit_at + len(unit)
        kind = dimension.value
        if dimension is Dimension.TIME:
            if not unit:
                self.fail(
                    f"{what} is a time; give the threshold a unit ({_TIME_UNITS_SHOWN}), "
                    f"e.g. '{_number(value)}ms'",
                    unit_at,
                )
            if unit in TIME_UNITS:
                shown = "µs" if unit in ("\u00b5s", "\u03bcs") else unit
                return value * TIME_UNITS[unit], shown
            self.bad_unit(unit, unit_at, unit_end, what, kind, _TIME_UNITS_SHOWN)
        if dimension is Dimension.RATIO:
            if unit == "%":
                if value > 100:
                    self.fail(f"{_number(value)}% is over 100%", number[0], unit_end)
                return value / 100, "%"
            if unit:
                self.bad_unit(unit, unit_at, unit_end, what, kind, "% or a bare number 0..1")
            if value > 1:
                self.fail(
                    f"{what} is a ratio 0..1 (or a percentage); did you mean {_number(value)}%?",
                    *number,
                )
            return value, ""
        if dimension is Dimension.TOKENS:
            if unit in ("", "tok"):
                return value, unit
            self.bad_unit(unit, unit_at, unit_end, what, kind, "tok or a bare number")
        if unit:
            self.bad_unit(unit, unit_at, unit_end, what, kind, "none (a bare number)")
        return value, ""

    def bad_unit(
        self, unit: str, start: int, end: int, what: str, kind: str, valid: str
    ) -> NoReturn:
        if not unit:
            self.unexpected(f"a unit for {what} ({valid})")
        every = [*TIME_UNITS, "%", "tok"]
        if unit in every:
            problem = f"{unit!r} does not fit {what}, a {kind} metric"
        else:
            problem = f"unknown unit {unit!r} for {what} (a {kind} metric)"
        close = [] if unit in every else difflib.get_close_matches(unit, every, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        self.fail(f"{problem}; {hint}valid units: {valid}", start, end)

    def end(self) -> None:
        self.skip_ws()
        if self.pos < len(self.text):
            ch = self.peek()
            if ch == "," or self.text[self.pos :].lstrip(",").strip()[:1] in _NAME_START:
                self.fail(
                    "unexpected text after the expression; give one expression per string "
                    "(pass several strings for several budgets)",
                    self.pos,
                    len(self.text.rstrip()),
                )
            if not ch.isascii() or not ch.isprintable():
                self.unexpected("the end of the expression")
            self.fail("unexpected text after the expression", self.pos, len(self.text.rstrip()))

    def goodput(self, start: int) -> Expectation:
        filters = self.filters()
        self.skip_ws()
        if self.peek() == ".":
            self.fail("good(...) is a fraction of calls and takes no statistic", self.pos)
        if self.peek() != "(":
            self.unexpected("'(' after good: good(ttft < 400ms, tpot < 50ms) >= 95%")
        open_at = self.pos
        self.pos += 1
        conditions: list[Condition] = []
        while True:
            self.skip_ws()
            if self.peek() == ")":
                if not conditions:
                    self.fail(
                        "good() needs at least one condition, e.g. good(ttft < 400ms)",
                        open_at,
                        self.pos + 1,
                    )
                self.pos += 1
                break
            conditions.append(self.condition())
            self.skip_ws()
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != ")":
                self.unexpected("',' or ')' in good(...)")
        self.skip_ws()
        if self.peek() == ".":
            self.fail("good(...) is a fraction of calls and takes no statistic", self.pos)
        op = self.op()
        threshold = self.threshold(Dimension.RATIO, "good(...)", op)
        self.end()
        return Expectation(
            text=self.text.strip(),
            metric=GOOD,
            stat=None,
            percentile=None,
            op=op,
            threshold=threshold.value,
            filters=filters,
            conditions=tuple(conditions),
            source=self.source,
            unit=threshold.unit,
        )

    def condition(self) -> Condition:
        name, start = self.name("a per-call metric for good(...)")
        if name == GOOD:
            self.fail("good(...) cannot be nested", start, start + len(name))
        spec = self.metric(name, start)
        if spec.scope is not Scope.CALL:
            per_call = ", ".join(s.name for s in METRICS.values() if s.scope is Scope.CALL)
            self.fail(
                f"good(...) conditions are per call, and {name} is per {spec.scope.value}; "
                f"per-call metrics: {per_call}",
                start,
                start + len(name),
            )
        self.skip_ws()
        if self.peek() == ".":
            self.fail(
                f"conditions inside good(...) apply to each call and take no statistic: "
                f"write '{name} < ...'",
                self.pos,
            )
        if self.peek() == "{":
            self.fail("put filters on good itself: good{model=x}(...)", self.pos)
        op = self.op()
        threshold = self.threshold(spec.dimension, name, op)
        text = self.text[start : threshold.end]
        return Condition(text, spec.name, op, threshold.value, threshold.unit)


def _example_tail(spec: MetricSpec) -> str:
    return {"cache_read_ratio": "> 0.5", "error_rate": "< 1%"}.get(spec.name, "<= 2")


# -- budgets.toml -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Defaults:
    """`[defaults]`: sampling for every budgeted test whose marker does not say otherwise."""

    samples: int | None = None
    warmup: int | None = None
    max_samples: int | None = None


@dataclass(frozen=True, slots=True)
class BudgetRule:
    """One `[[budget]]` table: which tests it selects and what it expects of them.

    A test is selected when its node id matches `select` (an fnmatch glob) and it carries the
    `marker`; a rule with only one of the two uses only that one.
    """

    expectations: tuple[Expectation, ...]
    select: str | None = None
    marker: str | None = None
    source: str = ""

    def selects(self, nodeid: str, markers: Sequence[str] = ()) -> bool:
        if self.select is not None and not _glob(nodeid, self.select):
            return False
        return self.marker is None or self.marker in markers


def _glob(nodeid: str, pattern: str) -> bool:
    # fnmatchcase: node ids are case-sensitive on every platform, unlike fnmatch on Windows.
    # A pattern that names a file or directory also selects every test in it.
    if fnmatch.fnmatchcase(nodeid, pattern):
        return True
    path = nodeid.split("::", 1)[0]
    return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(nodeid, pattern + "::*")


@dataclass(frozen=True, slots=True)
class BudgetFile:
    """A loaded `budgets.toml`."""

    path: str
    defaults: Defaults = Defaults()
    rules: tuple[BudgetRule, ...] = ()
    session: tuple[Expectation, ...] = ()

    def rules_for(self, nodeid: str, markers: Sequence[str] = ()) -> tuple[BudgetRule, ...]:
        return tuple(r for r in self.rules if r.selects(nodeid, markers))


_TOP_KEYS: Final = ("defaults", "budget", "session")
# A run-away sample count would turn one test into hours of API spend; cap it visibly.
MAX_SAMPLES: Final = 100_000
_DEFAULT_KEYS: Final = ("samples", "warmup", "max_samples")
_RULE_KEYS: Final = ("select", "marker", "expect")
_SESSION_KEYS: Final = ("expect",)


def load_budget_file(path: str | Path) -> BudgetFile:
    """Read and validate a budgets.toml; every `BudgetError` names `file:line`."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise BudgetError(f"cannot read budget file: {exc.strerror or exc}", source=str(p)) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # The line of the first byte that is not UTF-8 (a UTF-16 file fails at its BOM: line 1).
        line = raw.count(b"\n", 0, exc.start) + 1
        if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            why = "it starts with a UTF-16 byte-order mark; save it as UTF-8"
        else:
            why = f"{exc.reason} at byte {exc.start}; save it as UTF-8"
        raise BudgetError(f"budget file is not UTF-8 ({why})", source=f"{p}:{line}") from exc
    return parse_budget_file(text, path=str(p))


def parse_budget_file(text: str, *, path: str) -> BudgetFile:
    """Validate the text of a budgets.toml (`path` is only used in messages).

    A leading UTF-8 byte-order mark (Windows editors write one) is ignored: tomllib rejects it,
    and it is invisible in every editor, so an error about it would help no one.
    """
    text = text.removeprefix("\ufeff")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(exc, text, path) from exc
    return _FileReader(text, path).read(data)


def _toml_error(exc: tomllib.TOMLDecodeError, text: str, path: str) -> BudgetError:
    # tomllib puts "(at line L, column C)" in its message; lift the line into file:line. At the
    # end of the document it gives no line: name the line where the value left open started
    # (or the last line).
    message = str(exc)
    _, found, rest = message.partition("(at line ")
    line = rest.split(",", 1)[0].split(")", 1)[0]
    if found and line.isdigit():
        return BudgetError(f"invalid TOML: {message}", source=f"{path}:{line}")
    locator = _Locator(text) if "end of document" in message else None
    if locator is not None and locator.unclosed is not None:
        line, kind = str(locator.unclosed), locator.unclosed_kind
        hint = f"; the {kind} opened on line {line} is never closed"
        return BudgetError(f"invalid TOML: {message}{hint}", source=f"{path}:{line}")
    lines = text.rstrip().splitlines()
    return BudgetError(f"invalid TOML: {message}", source=f"{path}:{max(1, len(lines))}")


# A path into the TOML document: table and key names, and the index of a [[table]] or of an array
# item, e.g. ("budget", 1, "expect", 0) for the first expression of the second [[budget]].
_Path: TypeAlias = tuple[str | int, ...]


class _EndOfText(Exception):
    """The text ended inside a string, array or inline table."""


class _Locator:
    """Where each key, table and array item of a TOML text starts (tomllib keeps no positions).

    A tolerant scanner, run on text tomllib has already parsed (or, for an error at the end of
    the document, on text it rejected): it follows headers, `[[arrays of tables]]`, dotted and
    quoted keys, inline tables, nested arrays, every string form and comments, records the
    1-based line of every path it meets, and never raises. `unclosed` is the line where the
    outermost string, array or inline table that the text never closes was opened.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.newlines = [i for i, ch in enumerate(text) if ch == "\n"]
        self.lines: dict[_Path, int] = {}
        self.arrays_of_tables: dict[_Path, int] = {}  # path -> count of [[path]] so far
        self.unclosed: int | None = None
        self.unclosed_kind = ""
        with contextlib.suppress(_EndOfText):
            self.document()

    def line_at(self, offset: int) -> int:
        return bisect.bisect_left(self.newlines, offset) + 1

    def line_of(self, path: _Path) -> int:
        """The line of `path`, or of its closest recorded ancestor, or 1."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return 1

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.text[j] if j < len(self.text) else ""

    def skip_spaces(self) -> None:
        while self.peek() in (" ", "\t"):
            self.i += 1

    def skip_blank(self) -> None:
        """Spaces, newlines and comments."""
        while True:
            ch = self.peek()
            if ch in (" ", "\t", "\r", "\n"):
                self.i += 1
            elif ch == "#":
                self.skip_line()
            else:
                return

    def skip_line(self) -> None:
        end = self.text.find("\n", self.i)
        self.i = len(self.text) if end < 0 else end

    def record(self, path: _Path, offset: int) -> None:
        self.lines.setdefault(path, self.line_at(offset))

    def document(self) -> None:
        table: _Path = ()
        while True:
            self.skip_blank()
            if self.i >= len(self.text):
                return
            start = self.i
            if self.peek() == "[":
                table = self.header()
            else:
                self.key_value(table)
            if self.i == start:  # not TOML: move on to the next line
                self.skip_line()

    def header(self) -> _Path:
        start = self.i
        array = self.peek(1) == "["
        self.i += 2 if array else 1
        names = self.key()
        self.skip_spaces()
        self.i += 2 if array and self.peek() == "]" else 1
        self.skip_line()  # a header is alone on its line (but for a comment)
        path: _Path = ()
        for name in names[:-1] if array else names:
            path = self.resolve((*path, name))
            self.record(path, start)
        if not array:
            self.lines[path] = self.line_at(start)  # the header itself, not a dotted key above
            return path
        path = (*path, names[-1]) if names else path
        count = self.arrays_of_tables.get(path, 0)
        self.arrays_of_tables[path] = count + 1
        self.record(path, start)
        self.record((*path, count), start)
        return (*path, count)

    def resolve(self, path: _Path) -> _Path:
        """A table name that is an array of tables means its latest element."""
        count = self.arrays_of_tables.get(path)
        return path if count is None else (*path, count - 1)

    def key(self) -> list[str]:
        parts: list[str] = []
        while True:
            self.skip_spaces()
            ch = self.peek()
            if ch in ('"', "'"):
                start = self.i
                self.string()
                parts.append(_unquote(self.text[start : self.i]))
            else:
                start = self.i
                while self.peek() and (self.peek().isalnum() or self.peek() in "-_"):
                    self.i += 1
                if self.i == start:
                    return parts
                parts.append(self.text[start : self.i])
            self.skip_spaces()
            if self.peek() != ".":
                return parts
            self.i += 1

    def key_value(self, table: _Path) -> None:
        start = self.i
        names = self.key()
        self.skip_spaces()
        if not names or self.peek() != "=":
            return
        self.i += 1
        path = table
        for name in names:
            path = (*path, name)
            self.record(path, start)
        self.skip_spaces()
        self.value(path)

    def value(self, path: _Path) -> None:
        ch = self.peek()
        if ch in ('"', "'"):
            self.string()
        elif ch == "[":
            self.array(path)
        elif ch == "{":
            self.inline_table(path)
        else:  # number, boolean, date: up to the next delimiter
            while self.peek() and self.peek() not in ",]}\n#":
                self.i += 1

    def opened(self, start: int, kind: str) -> _EndOfText:
        # The outermost construct is the last to set these.
        self.unclosed, self.unclosed_kind = self.line_at(start), kind
        return _EndOfText()

    def string(self) -> None:
        start, quote = self.i, self.peek()
        multi = self.text.startswith(quote * 3, self.i)
        self.i += 3 if multi else 1
        while True:
            ch = self.peek()
            if not ch:
                raise self.opened(start, "string")
            if ch == "\\" and quote == '"':
                self.i += 2
            elif ch == "\n" and not multi:
                return  # an unterminated one-line string: tomllib names this line itself
            elif multi and self.text.startswith(quote * 3, self.i):
                self.i += 3
                while self.peek() == quote:  # up to two quotes may end the content
                    self.i += 1
                return
            elif ch == quote and not multi:
                self.i += 1
                return
            else:
                self.i += 1

    def array(self, path: _Path) -> None:
        start = self.i
        self.i += 1
        index = 0
        while True:
            self.skip_blank()
            ch = self.peek()
            if not ch:
                raise self.opened(start, "array")
            if ch == "]":
                self.i += 1
                return
            if ch == ",":
                self.i += 1
                continue
            before = self.i
            self.record((*path, index), before)
            self.value((*path, index))
            index += 1
            if self.i == before:  # not a value: skip a character rather than loop
                self.i += 1

    def inline_table(self, path: _Path) -> None:
        start = self.i
        self.i += 1
        while True:
            self.skip_blank()
            ch = self.peek()
            if not ch:
                raise self.opened(start, "inline table")
            if ch == "}":
                self.i += 1
                return
            if ch == ",":
                self.i += 1
                continue
            before = self.i
            self.key_value(path)
            if self.i == before:
                self.i += 1


def _unquote(token: str) -> str:
    """A quoted key's name (escapes decoded as JSON's, which cover TOML's common ones)."""
    if token.startswith("'"):
        return token.strip("'")
    try:
        value = json.loads(token)
    except ValueError:
        return token.strip('"')
    return value if isinstance(value, str) else token.strip('"')


class _FileReader:
    """Validates the decoded TOML; every error names the line `_Locator` found for its path."""

    def __init__(self, text: str, path: str) -> None:
        self.locator = _Locator(text)
        self.path = path

    def where(self, path: _Path) -> str:
        return f"{self.path}:{self.locator.line_of(path)}"

    def fail(self, reason: str, path: _Path) -> NoReturn:
        raise BudgetError(reason, source=self.where(path))

    def read(self, data: dict[str, Any]) -> BudgetFile:
        for key in data:
            if key in _DEFAULT_KEYS:
                self.fail(
                    f"{key!r} is a key of [defaults], not a table: put it under a [defaults] "
                    f"header (keys above the first [header] are top-level)",
                    (key,),
                )
            if key in _RULE_KEYS:
                self.fail(
                    f"{key!r} is a key of a [[budget]] rule (or, for 'expect', of [session]), "
                    f"not a table: put it under a [[budget]] or [session] header",
                    (key,),
                )
            if key not in _TOP_KEYS:
                self.unknown(key, _TOP_KEYS, "top-level table", (key,))
        defaults = self.defaults(data.get("defaults", {}))
        budgets = data.get("budget", [])
        if not isinstance(budgets, list) or not all(isinstance(b, dict) for b in budgets):
            self.fail("'budget' must be an array of tables: [[budget]]", ("budget",))
        rules = tuple(self.rule(b, i) for i, b in enumerate(budgets))
        if "session" not in data:
            return BudgetFile(self.path, defaults, rules, ())
        session_table = data["session"]
        if not isinstance(session_table, dict):
            self.fail("'session' must be a table: [session]", ("session",))
        for key in session_table:
            if key not in _SESSION_KEYS:
                self.unknown(key, _SESSION_KEYS, "key in [session]", ("session", key))
        session = self.expectations(session_table, ("session",), "[session]")
        return BudgetFile(self.path, defaults, rules, session)

    def unknown(self, key: str, valid: Sequence[str], what: str, path: _Path) -> NoReturn:
        close = difflib.get_close_matches(key, valid, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        self.fail(f"unknown {what} {key!r}; {hint}valid: {', '.join(valid)}", path)

    def defaults(self, table: Any) -> Defaults:
        if not isinstance(table, dict):
            self.fail("'defaults' must be a table: [defaults]", ("defaults",))
        values: dict[str, int | None] = {}
        for key, value in table.items():
            at = ("defaults", key)
            if key not in _DEFAULT_KEYS:
                self.unknown(key, _DEFAULT_KEYS, "key in [defaults]", at)
            lowest = 0 if key == "warmup" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                self.fail(f"{key} must be an integer >= {lowest}, got {value!r}", at)
            if value > MAX_SAMPLES:
                self.fail(f"{key} = {value} is over the limit of {MAX_SAMPLES}", at)
            values[key] = value
        defaults = Defaults(**values)
        if (
            defaults.samples is not None
            and defaults.max_samples is not None
            and defaults.max_samples < defaults.samples
        ):
            self.fail(
                f"max_samples ({defaults.max_samples}) is below samples ({defaults.samples})",
                ("defaults", "max_samples"),
            )
        return defaults

    def rule(self, table: dict[str, Any], index: int) -> BudgetRule:
        here: _Path = ("budget", index)
        for key in table:
            if key not in _RULE_KEYS:
                self.unknown(key, _RULE_KEYS, "key in [[budget]]", (*here, key))
        select, marker = table.get("select"), table.get("marker")
        for key, value in (("select", select), ("marker", marker)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                self.fail(f"{key} must be a non-empty string, got {value!r}", (*here, key))
        if marker is not None and not marker.isidentifier():
            self.fail(f"marker must be a pytest marker name, got {marker!r}", (*here, "marker"))
        if select is None and marker is None:
            self.fail(
                "a [[budget]] needs 'select' (a node-id glob) and/or 'marker' to choose tests",
                here,
            )
        expectations = self.expectations(table, here, "[[budget]]")
        return BudgetRule(expectations, select, marker, self.where(here))

    def expectations(
        self, table: dict[str, Any], here: _Path, what: str
    ) -> tuple[Expectation, ...]:
        """`expect` of a [[budget]] or of [session]: the same rules for both (a non-empty list
        of expressions, or one string; no budget twice)."""
        if "expect" not in table:
            self.fail(f"a {what} needs 'expect = [...]'", here)
        value = table["expect"]
        at: _Path = (*here, "expect")
        items: list[tuple[Any, _Path]]
        if isinstance(value, str):
            items = [(value, at)]
        elif isinstance(value, list):
            items = [(item, (*at, j)) for j, item in enumerate(value)]
        else:
            self.fail(f"'expect' must be a list of strings, got {type(value).__name__}", at)
        if not items:
            self.fail(f"'expect' is empty: a {what} with no budget checks nothing", at)
        parsed: list[Expectation] = []
        # The same budget by meaning: 'ttft.p95 < 400ms' and 'ttft.p95<0.4s' are one budget.
        seen: dict[tuple[str, str, float], tuple[Expectation, _Path]] = {}
        for item, item_at in items:
            expectation = parse_expectation(item, source=self.where(item_at))
            key = (expectation.label, expectation.op, expectation.threshold)
            previous, first = seen.setdefault(key, (expectation, item_at))
            if first != item_at:
                self.fail(
                    f"'expect' of this {what} gives the same budget twice: "
                    f"{_quote(previous.text)} (line {self.locator.line_of(first)}) and "
                    f"{_quote(expectation.text)} (line {self.locator.line_of(item_at)}); "
                    f"remove one",
                    item_at,
                )
            parsed.append(expectation)
        return tuple(parsed)
