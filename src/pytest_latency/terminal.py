"""Terminal output: the latency summary table printed at the end of a run.

Owns the layout of the summary for a terminal: fixed-width columns and the budget misses below
them. Every figure is read from the test's pool (the same values the result file and the report
show) and formatted by `units`; nothing is computed here. May import `testdata`, `pools`,
`verdicts` and `units`; never pytest (the plugin hands the lines to pytest's terminal reporter).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_latency import units

if TYPE_CHECKING:
    from pytest_latency.testdata import TestData

_HEADERS = (
    "test",
    "n",
    "calls",
    "err",
    "ttft p50",
    "ttft p95",
    "tpot p50",
    "e2e p95",
    "turn p95",
    "cache",
    "verdict",
)


def verdict(test: TestData) -> str:
    """One word for a test: fail if any budget failed the gate, inconclusive if any was not
    confident (whatever the policy made of it), pass, or "-" for a test without budgets."""
    from pytest_latency.verdicts import worst_status

    return worst_status(j.status for j in test.judgements) or "-"


def summary_lines(tests: Sequence[TestData], *, width: int = 48) -> list[str]:
    rows = []
    for test in tests:
        pool = test.pool
        ratio = pool.cache_ratio()
        rows.append(
            (
                _shorten(test.nodeid, width),
                str(test.samples),
                str(len(pool.calls)),
                str(pool.errors),
                units.duration(pool.percentile("ttft", 50)),
                units.duration(pool.percentile("ttft", 95)),
                units.duration(pool.percentile("tpot", 50)),
                units.duration(pool.percentile("e2e", 95)),
                units.duration(pool.percentile("turn", 95)),
                units.ratio(ratio.value if ratio else None),
                verdict(test),
            )
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(_HEADERS)]
    lines = [_row(_HEADERS, widths)]
    lines.extend(_row(r, widths) for r in rows)
    misses = [f"  {t.nodeid}: {j.message}" for t in tests for j in t.judgements if not j.passed]
    if misses:
        lines.append("budget misses:")
        lines.extend(misses)
    return lines


def _row(cells: tuple[str, ...], widths: list[int]) -> str:
    first = cells[0].ljust(widths[0])
    rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
    return "  ".join([first, *rest])


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1) :]
