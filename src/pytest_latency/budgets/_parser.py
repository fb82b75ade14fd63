"""The budget expression grammar and its parser: text → `Expectation`, or a `BudgetError`.

Owns `parse_expectation`, the one language of `@pytest.mark.latency(...)` and `budgets.toml`,
and every hint it gives for a mistake (aliases from other tools, look-alike Unicode, k6 syntax).
Thresholds are normalised here, at the edge, to the catalogue's base units. The parser is a
hand-written scanner with one method per grammar rule; it never uses `eval` and no regular
expressions, so every error can point at the exact column.
Imports only the stdlib, `pytest_latency.catalogue` and its siblings `_errors` and
`_expression`; never pytest, the statistics, or anything that measures.

Grammar (whitespace allowed between tokens)::

    expectation := good | metric_expectation
    metric_expectation := NAME [filters] ["." stat] op threshold
    good        := "good" [filters] "(" condition ("," condition)* [","] ")" op threshold
    condition   := NAME op threshold                       # a per-call metric, no stat
    filters     := "{" KEY "=" value ("," KEY "=" value)* [","] "}"    # KEY: model endpoint api
    value       := QUOTED | bare token (no space , = { } quotes)
    stat        := "min" | "max" | "mean" | "sum" | "p" N      # 0 < N < 100, e.g. p99.9
    op          := "<" | "<=" | ">" | ">="
    threshold   := ["$"] NUMBER [UNIT]  # ns us µs ms s | % | tok | usd, as the dimension allows
"""

from __future__ import annotations

import difflib
import math
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NoReturn

from pytest_latency.budgets._errors import BudgetError
from pytest_latency.budgets._expression import (
    FILTER_KEYS,
    GOOD,
    LEVEL_FILTER_KEYS,
    MONEY_UNITS,
    TIME_UNITS,
    VALUE_STOP,
    Condition,
    Expectation,
    Op,
    format_number,
)
from pytest_latency.catalogue import METRICS, Dimension, MetricSpec, Scope

__all__ = ["MAX_EXPRESSION_LENGTH", "MAX_THRESHOLD", "parse_expectation"]

_TIME_UNITS_SHOWN: Final = "ns, us, µs, ms, s"
_STATS_SHOWN: Final = (
    "p50, p90, p95, p99, p99.9 (any pN with 0 < N < 100), min, max, mean, sum (tokens and cost)"
)
_MONEY_UNITS_SHOWN: Final = "usd, or a leading $"
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
        self.skip_ws()
        filters_at = self.pos
        filters = self.filters()
        # A level filter ({concurrency=16}) chooses the test of a sweep, not calls: any metric
        # takes one.
        if any(key not in LEVEL_FILTER_KEYS for key, _ in filters) and not spec.filterable:
            self.fail(
                f"{spec.name} is the {spec.summary} and takes no filter: filters select calls, "
                f"and a sample's {spec.name} is no call's",
                filters_at,
                self.pos,
            )
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
        while self.peek() and not self.peek().isspace() and self.peek() not in VALUE_STOP:
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
        if name == "sum":
            if not spec.takes_sum:
                self.fail(
                    f"sum adds up tokens or cost, not {spec.name} (a {spec.dimension.value} "
                    "metric): its values do not add to anything a run spends",
                    start,
                    start + 3,
                )
            stat, percentile = name, None
        elif name in ("min", "max", "mean"):
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
            close = difflib.get_close_matches(name.lower(), ["min", "max", "mean", "sum"], n=1)
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
        self.skip_ws()
        dollar_at = self.pos if self.peek() == "$" else None
        if dollar_at is not None:  # `$0.002`: money written the way prices are
            self.pos += 1
        value, start = self.number()
        number_end = self.pos
        unit, unit_at = self.unit()
        end = self.pos
        if dollar_at is not None:
            if dimension is not Dimension.MONEY:
                self.fail(f"'$' does not fit {what}, a {dimension.value} metric", dollar_at)
            if unit:
                self.fail(
                    f"write '${format_number(value)}' or '{format_number(value)}usd', not both",
                    dollar_at,
                    end,
                )
            unit, start = "$", dollar_at
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
                    f"e.g. '{format_number(value)}ms'",
                    unit_at,
                )
            if unit in TIME_UNITS:
                shown = "µs" if unit in ("\u00b5s", "\u03bcs") else unit
                return value * TIME_UNITS[unit], shown
            self.bad_unit(unit, unit_at, unit_end, what, kind, _TIME_UNITS_SHOWN)
        if dimension is Dimension.RATIO:
            if unit == "%":
                if value > 100:
                    self.fail(f"{format_number(value)}% is over 100%", number[0], unit_end)
                return value / 100, "%"
            if unit:
                self.bad_unit(unit, unit_at, unit_end, what, kind, "% or a bare number 0..1")
            if value > 1:
                self.fail(
                    f"{what} is a ratio 0..1 (or a percentage); "
                    f"did you mean {format_number(value)}%?",
                    *number,
                )
            return value, ""
        if dimension is Dimension.TOKENS:
            if unit in ("", "tok"):
                return value, unit
            self.bad_unit(unit, unit_at, unit_end, what, kind, "tok or a bare number")
        if dimension is Dimension.MONEY:
            if unit in MONEY_UNITS:
                return value * MONEY_UNITS[unit], unit
            if not unit:
                self.fail(
                    f"{what} is money; give the threshold a unit ({_MONEY_UNITS_SHOWN}), "
                    f"e.g. '{format_number(value)}usd' or '${format_number(value)}'",
                    unit_at,
                )
            self.bad_unit(unit, unit_at, unit_end, what, kind, _MONEY_UNITS_SHOWN)
        if unit:
            self.bad_unit(unit, unit_at, unit_end, what, kind, "none (a bare number)")
        return value, ""

    def bad_unit(
        self, unit: str, start: int, end: int, what: str, kind: str, valid: str
    ) -> NoReturn:
        if not unit:
            self.unexpected(f"a unit for {what} ({valid})")
        every = [*TIME_UNITS, "%", "tok", "usd"]
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
            # A per-sample metric has its own distribution to budget: say how.
            own = f" (budget it on its own: '{name}.p90 ...'); " if spec.takes_stat else "; "
            self.fail(
                f"good(...) conditions are per call, and {name} is per {spec.scope.value}{own}"
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
