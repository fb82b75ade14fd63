"""A parsed budget: `Expectation` and its `Condition`s, and values rendered in a budget's unit.

Owns the frozen records the parser produces (`ttft{model=m}.p95 < 400ms`, `good(ttft < 400ms)
>= 95%`), their vocabulary (operators, the `good` pseudo-metric, filter keys, time units), how a
statistic is judged against a threshold, and how a base-unit value reads back in the unit the
author wrote (`612000.0` µs → `612 ms`). Thresholds are in the catalogue's base units:
microseconds for time, 0..1 for ratios, plain numbers for tokens and counts.
Imports only the stdlib, `pytest_latency.catalogue` and `pytest_latency.units` (the rule that no
rounding crosses a threshold); never pytest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from pytest_latency.catalogue import METRICS, Dimension
from pytest_latency.units import decimals_apart, exact_decimals

__all__ = [
    "FILTER_KEYS",
    "GOOD",
    "MONEY_UNITS",
    "OPS",
    "TIME_UNITS",
    "VALUE_STOP",
    "Condition",
    "Expectation",
    "Op",
    "format_number",
]


Op = Literal["<", "<=", ">", ">="]
OPS: Final[tuple[Op, ...]] = ("<", "<=", ">", ">=")

# The pseudo-metric of goodput expressions. Deliberately not a catalogue entry: it is computed
# from other metrics per call, and the catalogue stays the list of things we measure.
GOOD: Final = "good"

# `api`, `endpoint`, `model` select calls; `concurrency` and `rate` select the level of a sweep
# a test runs at (`plugin._sweep`: a budget on any other test's level applies to none).
LEVEL_FILTER_KEYS: Final = ("concurrency", "rate")
FILTER_KEYS: Final = ("api", "concurrency", "endpoint", "model", "rate")

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
# Micro-US-dollars (how money is stored, `catalogue.Dimension.MONEY`) per unit: `usd`, or a
# leading `$` (`$0.002`), which the parser records as the unit "$".
MONEY_UNITS: Final[Mapping[str, float]] = {"usd": 1e6, "$": 1e6}
# A bare filter value ends at whitespace or at the filter's own punctuation.
VALUE_STOP: Final = frozenset(",={}'\"")


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
        return _format(value, METRICS[self.metric].dimension, self.unit, self.threshold)

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
    def place(self) -> tuple[str, int | None]:
        """(file, line) of a budget read from budgets.toml (`source` is `path:line` there),
        or (source, None) for one from a marker or elsewhere."""
        path, _, line = self.source.rpartition(":")
        return (path, int(line)) if path and line.isdigit() else (self.source, None)

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

    @property
    def meaning(self) -> tuple[str, str, float]:
        """What makes two budgets the same budget whatever their spelling or unit: 'ttft.p95 <
        400ms' and 'ttft.p95<0.4s' are one (a test or rule may not give it twice)."""
        return (self.label, self.op, self.threshold)

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
        """Render a base-unit value in this expression's unit: `612000.0` → `'612 ms'`. Against
        the threshold no rounding crosses it: 399.7 ms reads `399.7 ms` beside `400 ms`, and
        98.96% `98.96%` beside a `99%` budget (`units.decimals_apart`)."""
        return _format(value, self.dimension, self.unit, self.threshold)

    def describe(
        self,
        value: float,
        *,
        n: int | None = None,
        interval: tuple[float, float] | None = None,
    ) -> str:
        """`ttft.p95 = 612 ms > 400 ms (n=20)`: the observed value, how it compares, the budget.

        The operator shown is the true relation between the value and the threshold, so the
        same sentence reads right for a pass and a miss; at equality it is the budget's own
        operator when that holds (`calls.max = 3 <= 3`) and its negation when it does not
        (`calls.max = 3 >= 3` for `calls.max < 3`), never a bare `=`.
        """
        if math.isnan(value):
            relation = "?"
        elif value < self.threshold:
            relation = "<"
        elif value > self.threshold:
            relation = ">"
        else:
            relation = self.op if self.holds(value) else _NEGATION[self.op]
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


# What a relation that does not hold reads as, at equality: not `< 3` is `>= 3`.
_NEGATION: Final[Mapping[Op, Op]] = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def _compare(value: float, op: Op, threshold: float) -> bool:
    if op == "<":
        return value < threshold
    if op == "<=":
        return value <= threshold
    if op == ">":
        return value > threshold
    return value >= threshold


def _scale(dimension: Dimension, unit: str) -> float:
    """Base units per unit shown: a value reads as `value / scale` in its author's unit."""
    if dimension is Dimension.TIME:
        return TIME_UNITS[unit]
    if dimension is Dimension.RATIO and unit == "%":
        return 0.01
    if dimension is Dimension.MONEY:
        return MONEY_UNITS[unit]
    return 1.0


def _format(value: float, dimension: Dimension, unit: str, threshold: float | None = None) -> str:
    """`value` in `unit`, to about three significant digits; against `threshold`, with the digits
    `units.decimals_apart` says it needs to stand on its own side of it, and the threshold
    itself in full (`1234.5 ms`, not `1234 ms`)."""
    if math.isnan(value):
        return "nan"
    scale = _scale(dimension, unit)
    shown = value / scale
    decimals = _decimals(shown)
    if threshold is not None and math.isfinite(threshold):
        limit = threshold / scale
        if value == threshold:
            decimals = exact_decimals(shown, decimals)
        else:
            decimals = decimals_apart(shown, (limit,), max(decimals, exact_decimals(limit, 0)))
    number = format_number(shown, decimals)
    if dimension is Dimension.TIME:
        return f"{number} {unit}"
    if dimension is Dimension.RATIO:
        return f"{number}%" if unit == "%" else number
    if dimension is Dimension.MONEY and unit == "$":
        return f"${number}"
    return f"{number} {unit}" if unit else number


def _decimals(x: float) -> int:
    """About three significant digits: 612, 41.5, 1.23, 0.42, 0.00123."""
    ax = abs(x)
    if ax >= 100 or ax == 0 or not math.isfinite(ax):
        return 0
    if ax >= 10:
        return 1
    if ax >= 1:
        return 2
    return 2 - math.floor(math.log10(ax))


def format_number(x: float, decimals: int | None = None) -> str:
    """About three significant digits (or `decimals` places), never in exponent form: 612,
    41.5, 0.42, 1234; trailing zeros dropped."""
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    places = _decimals(x) if decimals is None else decimals
    text = f"{x:.{places}f}"
    text = text.rstrip("0").rstrip(".") if "." in text else text
    return "0" if text == "-0" else text


def _filter_value(value: str) -> str:
    bare = all(c.isascii() and c.isprintable() and not c.isspace() for c in value)
    if value and bare and not any(c in VALUE_STOP for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
