"""Terminal output: the latency summary table printed at the end of a run.

Owns the formatting of `TestSummary` rows for a terminal: fixed-width columns, durations in
milliseconds, absent values shown as '-'. May import `aggregate`; never pytest (the plugin hands
the lines to pytest's terminal reporter).
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_latency.aggregate import TestSummary

_HEADERS = (
    "test",
    "n",
    "calls",
    "err",
    "ttft p50",
    "ttft p95",
    "tpot p50",
    "e2e p95",
    "cache",
    "verdict",
)


def _ms(value_us: float | None) -> str:
    if value_us is None:
        return "-"
    ms = value_us / 1000
    return f"{ms:.1f}ms" if ms < 1000 else f"{ms / 1000:.2f}s"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def summary_lines(summaries: Sequence[TestSummary], *, width: int = 48) -> list[str]:
    rows = [
        (
            _shorten(s.nodeid, width),
            str(s.samples),
            str(s.calls),
            str(s.errors),
            _ms(s.ttft_p50),
            _ms(s.ttft_p95),
            _ms(s.tpot_p50),
            _ms(s.e2e_p95),
            _ratio(s.cache_read_ratio),
            s.verdict,
        )
        for s in summaries
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(_HEADERS)]
    lines = [_row(_HEADERS, widths)]
    lines.extend(_row(r, widths) for r in rows)
    misses = [f"  {s.nodeid}: {j.message}" for s in summaries for j in s.judgements if not j.passed]
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
