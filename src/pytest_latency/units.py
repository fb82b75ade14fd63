"""Numbers for people: durations, token counts, ratios and relative changes as text.

The one owner of how a value reads wherever it is shown (the terminal summary, finding messages,
the HTML report, the Markdown summary), and of the rule that an absent value shows as an en dash,
never as 0. Budget values are the exception: they render in the unit their author wrote
(`budgets.Expectation.format_value`). A leaf: stdlib only, imports nothing from the package.
"""

from __future__ import annotations

import math

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
    """A share as a whole percentage (`0.456` → `46%`); the same text as `ratio`."""
    return ratio(share)


def value(metric_unit: str, number: float | None) -> str:
    """A metric block's number in its unit (`us` or `tok`)."""
    return tokens(number) if metric_unit == "tok" else duration(number)


def ratio(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return ABSENT
    return f"{value:.0%}"


def change(fraction: float | None) -> str:
    """A signed relative change: `+53%`, `-8.2%`, `±0%`."""
    if fraction is None or not math.isfinite(fraction):
        return ABSENT
    pct = fraction * 100
    if round(pct, 1) == 0:
        return "±0%"
    text = f"{pct:+.0f}%" if abs(pct) >= 10 else f"{pct:+.1f}%"
    return text
