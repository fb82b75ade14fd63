"""Numbers for people: durations, token counts, money, ratios and relative changes as text.

The one owner of how a value reads wherever it is shown (the terminal summary, finding messages,
the HTML report, the Markdown summary), and of the rule that an absent value shows as an en dash,
never as 0, and the rule that no rounding moves a value across a threshold it is read against
(`decimals_apart`). Budget values are the exception: they render in the unit their author wrote
(`budgets.Expectation.format_value`). A leaf: stdlib only, imports nothing from the package.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

ABSENT = "–"


def duration(us: float | None) -> str:
    """µs → `850 µs`, `41.5 ms`, `612 ms`, `1.23 s`: about three significant digits."""
    if us is None or not math.isfinite(us):
        return ABSENT
    if abs(us) < 1000:
        return f"{us:.0f} µs"
    if abs(us) < 1_000_000:
        ms = us / 1000
        return f"{ms:.1f} ms" if abs(ms) < 100 else f"{ms:.0f} ms"
    return f"{us / 1_000_000:.2f} s"


def tokens(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return ABSENT
    return f"{value:,.0f} tok"


def percent(share: float | None) -> str:
    """A share as a percentage (`0.456` → `46%`); the same text as `ratio`."""
    return ratio(share)


def value(metric_unit: str, number: float | None) -> str:
    """A metric block's number in its unit (`us`, `tok` or `microusd`)."""
    if metric_unit == "tok":
        return tokens(number)
    return money(number) if metric_unit == "microusd" else duration(number)


def money(microusd: float | None) -> str:
    """µ$ → `$0.000350`, `$0.0123`, `$1.23`, `$412`: about three significant digits, never
    in scientific notation (a cent-fraction must read as one)."""
    if microusd is None or not math.isfinite(microusd):
        return ABSENT
    usd = microusd / 1e6
    if usd == 0:
        return "$0"
    sign, usd = ("-", -usd) if usd < 0 else ("", usd)
    if usd >= 100:
        return f"{sign}${usd:.0f}"
    decimals = max(2 - math.floor(math.log10(usd)), 2)
    return f"{sign}${usd:.{decimals}f}"


def calls_by_model(counts: Mapping[str, int]) -> str:
    """`'house-model' (3 calls), 'other' (1 call)`: models named with their calls, in order."""
    return ", ".join(f"{model!r} ({n} call{'' if n == 1 else 's'})" for model, n in counts.items())


def ratio(value: float | None, thresholds: Iterable[float] = ()) -> str:
    """A share as a percentage, whole unless a boundary needs more: the digits `decimals_apart`
    gives against 0 %, 100 % and `thresholds` (budgets the value is held to, as 0..1), so
    0.989 against a 99 % budget reads `98.9%`, never `99%`, and 0.4 % of errors never `0%`."""
    if value is None or not math.isfinite(value):
        return ABSENT
    pct = value * 100
    limits = [t * 100 for t in thresholds if math.isfinite(t)]
    # As precise as the budgets it is read against: 98.6% beside a 99.5% budget, as the
    # budget's own message says it, not 99%.
    decimals = max((exact_decimals(t, 0) for t in limits), default=0)
    decimals = decimals_apart(pct, (0.0, 100.0, *limits), decimals)
    return f"{pct:.{decimals}f}%"


# How many digits past the usual a value may need to stand apart from a threshold; beyond this a
# float's own precision is reached.
_MAX_EXTRA_DECIMALS = 12


def exact_decimals(x: float, decimals: int = 0) -> int:
    """The fewest decimals, at least `decimals`, that show `x` exactly (to a float's noise: 99.5
    stored as 0.995 × 100): how a threshold people wrote is shown."""
    if not math.isfinite(x):
        return decimals
    for places in range(decimals, decimals + _MAX_EXTRA_DECIMALS):
        if abs(round(x, places) - x) <= 1e-9 * max(1.0, abs(x)):
            return places
    return decimals + _MAX_EXTRA_DECIMALS


def decimals_apart(value: float, thresholds: Iterable[float], decimals: int) -> int:
    """The fewest decimals, at least `decimals`, at which `value` rounded stands on the same side
    of every threshold as it truly does: a value below a threshold never reads as equal to or
    above it (98.9 % is not "99%" next to a 99 % budget), and one equal to it reads equal. The
    thresholds are compared as they are, so they must be shown exactly. The one owner of that
    rule: ratios here and budget values (`budgets.Expectation.format_value`) both use it."""
    limits = [t for t in thresholds if math.isfinite(t)]
    if not math.isfinite(value):
        return decimals
    for places in range(decimals, decimals + _MAX_EXTRA_DECIMALS + 1):
        shown = round(value, places)
        if all((shown > t) - (shown < t) == (value > t) - (value < t) for t in limits):
            return places
    return decimals + _MAX_EXTRA_DECIMALS


def change(fraction: float | None) -> str:
    """A signed relative change: `+53%`, `-8.2%`, `±0%`."""
    if fraction is None or not math.isfinite(fraction):
        return ABSENT
    pct = fraction * 100
    if round(pct, 1) == 0:
        return "±0%"
    text = f"{pct:+.0f}%" if abs(pct) >= 10 else f"{pct:+.1f}%"
    return text
