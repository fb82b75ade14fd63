"""`parse_tolerance`: the relative slowdown a regression check ignores, written `10%` or `0.1`.

Owns the one reading of a tolerance for both places that take one (`pytest-latency compare
--tolerance` and `--latency-tolerance`), so `10%` means the same in each; the callers wrap the
`BudgetError` in their own kind of usage error. Imports only the stdlib and its sibling
`_errors`; never pytest, never argparse.
"""

from __future__ import annotations

from typing import Final

from pytest_latency.budgets._errors import BudgetError

__all__ = ["MAX_TOLERANCE", "parse_tolerance"]

# A tolerance of 10 (1000%) would hide a tenfold slowdown: such a value is a typo, not a choice.
MAX_TOLERANCE: Final = 10.0


def parse_tolerance(text: str) -> float:
    """`"10%"` or `"0.1"` → `0.1`; surrounding whitespace is ignored.

    Raises `BudgetError` whose `reason` says what is wrong: not a number or a percentage, or
    outside 0% .. 1000%.
    """
    shown = text.strip()
    try:
        value = float(shown[:-1]) / 100 if shown.endswith("%") else float(shown)
    except ValueError:
        raise BudgetError("expected a number or a percentage such as 10%") from None
    if not 0 <= value < MAX_TOLERANCE:
        raise BudgetError("must be between 0% and 1000%")
    return value
