"""Latency budgets: the expression language of `@pytest.mark.latency(...)` and `budgets.toml`.

Re-exports the public names of its private modules, each owning one thing: `_errors`
(`BudgetError`, `BudgetErrors` and how they render), `_expression` (`Expectation`, `Condition`,
their vocabulary, values rendered in a budget's unit), `_parser` (the grammar and
`parse_expectation`), `_file` (`BudgetFile`, `BudgetRule`, `Defaults`: loading budgets.toml and
choosing a test's rules), `_lines` (the line of a TOML key, for `budgets.toml:12` messages) and
`_tolerance` (`parse_tolerance`, for the regression checks). Imports only the stdlib,
`pytest_latency.catalogue` and `pytest_latency.units`; never pytest (the plugin turns
`BudgetError` into a usage or collection error), the statistics, or anything that measures. The
plugin imports this package lazily, when a budget is first needed.
"""

from __future__ import annotations

from pytest_latency.budgets._errors import BudgetError, BudgetErrors
from pytest_latency.budgets._expression import (
    FILTER_KEYS,
    GOOD,
    LEVEL_FILTER_KEYS,
    OPS,
    TIME_UNITS,
    Condition,
    Expectation,
    Op,
)
from pytest_latency.budgets._file import (
    MAX_SAMPLES,
    PRICE_KEYS,
    BudgetFile,
    BudgetRule,
    Defaults,
    PriceOverride,
    load_budget_file,
    parse_budget_file,
)
from pytest_latency.budgets._parser import MAX_EXPRESSION_LENGTH, MAX_THRESHOLD, parse_expectation
from pytest_latency.budgets._tolerance import MAX_TOLERANCE, parse_tolerance

__all__ = [
    "FILTER_KEYS",
    "GOOD",
    "LEVEL_FILTER_KEYS",
    "MAX_EXPRESSION_LENGTH",
    "MAX_SAMPLES",
    "MAX_THRESHOLD",
    "MAX_TOLERANCE",
    "OPS",
    "PRICE_KEYS",
    "TIME_UNITS",
    "BudgetError",
    "BudgetErrors",
    "BudgetFile",
    "BudgetRule",
    "Condition",
    "Defaults",
    "Expectation",
    "Op",
    "PriceOverride",
    "load_budget_file",
    "parse_budget_file",
    "parse_expectation",
    "parse_tolerance",
]
