"""The result file: the versioned JSON record of a run, and merging and comparing such files.

Owns the schema `pytest-latency/1` (documented field by field in docs/result-schema.md). Its
private modules each own one part: `_schema` (the TypedDicts and validation), `_blocks` (metric
blocks, counters, cache ratios), `_budgets` (budget entries and how they are counted), `_build`
(a run's file from the plugin's per-test records), `_merge` (shards into one file), `_compare`
(two runs, regressions) and `_io` (strict JSON, the one atomic writer, loading). The report
renders what this package builds; it never recomputes a metric.

May import `testdata`, `pools`, `calls`, `verdicts`, `diagnose`, `budgets`, `histogram`,
`stats`, `catalogue`, `metrics`; never pytest, never jinja2.
"""

from __future__ import annotations

from pytest_latency.results._blocks import PERCENTILES, cost_of_block
from pytest_latency.results._budgets import (
    budget_status,
    session_label,
    test_status,
    verdict_counts,
)
from pytest_latency.results._build import ResultBuilder, build_result, test_blocks
from pytest_latency.results._compare import (
    MIN_VALUES,
    SIGNIFICANCE,
    Comparison,
    MetricChange,
    baseline_block,
    changes_of,
    compare_results,
    describe,
    describe_rollup,
    p_text,
)
from pytest_latency.results._io import (
    WriteError,
    dumps,
    load_result,
    write_atomic,
    write_result,
)
from pytest_latency.results._merge import merge_results
from pytest_latency.results._schema import SCHEMA, ResultError, ResultFile, TestEntry

__all__ = [
    "MIN_VALUES",
    "PERCENTILES",
    "SCHEMA",
    "SIGNIFICANCE",
    "Comparison",
    "MetricChange",
    "ResultBuilder",
    "ResultError",
    "ResultFile",
    "TestEntry",
    "WriteError",
    "baseline_block",
    "budget_status",
    "build_result",
    "changes_of",
    "compare_results",
    "cost_of_block",
    "describe",
    "describe_rollup",
    "dumps",
    "load_result",
    "merge_results",
    "p_text",
    "session_label",
    "test_blocks",
    "test_status",
    "verdict_counts",
    "write_atomic",
    "write_result",
]
