"""Values a test recorded by hand, as the summary rows show them.

Owns the summary tables' figure columns (`FIGURES`) and the one text every summary (terminal,
Markdown, HTML) puts in its "by hand" column: each
metric the test recorded with `latency.record()`/`latency.timer()` (kept samples), how many
values, and for a metric the tables have no column of their own for, its p50. The counts come
from `pools.Pool.manual_counts` (the result file keeps them as a test's `recorded`); the p50 is
the one the test's metric block holds. May import the stdlib, `units` and `catalogue`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_latency import units
from pytest_latency.catalogue import METRICS, POOLED_METRICS

# The figure columns of every summary table (terminal, Markdown), in order, and the metrics they
# show: a value recorded by hand for one of these already shows in its column.
FIGURES = ("ttft p50", "ttft p95", "tpot p50", "e2e p95", "turn p95", "cache")
COLUMNS = tuple(dict.fromkeys(f.split()[0] for f in FIGURES if " " in f))
HEADER = "by hand"


def by_hand_text(counts: Mapping[str, int], p50: Callable[[str], float | None]) -> str:
    """`ttfb ×3 p50 200 ms, ttft ×3`, in the order recorded; "" when nothing was. `p50` gives
    a metric's median over all the test's values of it, in the metric's own unit."""
    parts = []
    for metric, count in counts.items():
        text = f"{metric} ×{count}"
        if metric not in COLUMNS and metric in POOLED_METRICS:
            text += f" p50 {units.value(METRICS[metric].unit, p50(metric))}"
        parts.append(text)
    return ", ".join(parts)


def by_hand_of_entry(test: Mapping[str, Any]) -> str:
    """The same text for a result file's test entry (the Markdown summary and the HTML report
    render from the file): its `recorded` counts, the p50s its metric blocks hold."""
    recorded = test.get("recorded") or {}
    metrics = test.get("metrics") or {}

    def p50(metric: str) -> float | None:
        value = (metrics.get(metric) or {}).get("p50")
        return float(value) if isinstance(value, (int, float)) else None

    return by_hand_text({str(k): int(v) for k, v in recorded.items()}, p50)
