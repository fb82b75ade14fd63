"""The metric catalogue: every metric name the product exposes, and what kind of value it is.

Owns the names (they are public API, see docs/metrics.md), each metric's scope (per call, per
chunk, per sample, or an aggregate over calls) and its dimension (time, tokens, ratio, count).
The budget grammar validates against it and the metric computation produces exactly these names.
It is a leaf: stdlib only, imports nothing from the package.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Scope(enum.Enum):
    CALL = "call"
    CHUNK = "chunk"
    SAMPLE = "sample"
    AGGREGATE = "aggregate"


class Dimension(enum.Enum):
    TIME = "time"  # stored in microseconds
    TOKENS = "tokens"
    RATIO = "ratio"  # 0..1; budgets may write it as a percentage
    COUNT = "count"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    scope: Scope
    dimension: Dimension
    summary: str

    @property
    def takes_stat(self) -> bool:
        """Distributions take a statistic (`ttft.p95`); aggregates are one number (`error_rate`)."""
        return self.scope is not Scope.AGGREGATE


_SPECS = (
    MetricSpec("ttfb", Scope.CALL, Dimension.TIME, "request sent → response headers"),
    MetricSpec("ttft", Scope.CALL, Dimension.TIME, "request sent → first content event"),
    MetricSpec("ttfo", Scope.CALL, Dimension.TIME, "request sent → first non-reasoning output"),
    MetricSpec("e2e", Scope.CALL, Dimension.TIME, "request sent → last content event"),
    MetricSpec("tpot", Scope.CALL, Dimension.TIME, "(e2e − ttft) / (output_tokens − 1)"),
    MetricSpec("itl", Scope.CHUNK, Dimension.TIME, "gap between successive content events"),
    MetricSpec("input_tokens", Scope.CALL, Dimension.TOKENS, "all prompt tokens, cached included"),
    MetricSpec("output_tokens", Scope.CALL, Dimension.TOKENS, "output tokens the server reported"),
    MetricSpec("cache_read_tokens", Scope.CALL, Dimension.TOKENS, "prompt tokens read from cache"),
    MetricSpec(
        "cache_write_tokens", Scope.CALL, Dimension.TOKENS, "prompt tokens written to cache"
    ),
    MetricSpec("cache_read_ratio", Scope.AGGREGATE, Dimension.RATIO, "Σ cache reads / Σ input"),
    MetricSpec("error_rate", Scope.AGGREGATE, Dimension.RATIO, "failed calls / all calls"),
    MetricSpec("calls", Scope.SAMPLE, Dimension.COUNT, "LLM calls made by one sample"),
    MetricSpec("retries", Scope.AGGREGATE, Dimension.COUNT, "extra attempts the SDK made"),
)

METRICS: dict[str, MetricSpec] = {spec.name: spec for spec in _SPECS}

TIME_METRICS = tuple(s.name for s in _SPECS if s.dimension is Dimension.TIME)
