"""The result file's schema `pytest-latency/1`, as types, and the check that a file is one.

Owns the schema name, the TypedDicts every builder returns and every reader (merge, compare, the
report, the CLI) reads, documented field by field in docs/result-schema.md, and `ResultError`;
`_validate` checks a file against them before any reader trusts it. Keys an older file may lack
are `NotRequired`. Stdlib only; never pytest, never jinja2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, TypedDict

if TYPE_CHECKING:
    # Only the type checker reads it: under `from __future__ import annotations` the TypedDicts'
    # annotations stay strings at run time, so Python 3.10 needs no backport installed.
    from typing_extensions import NotRequired

SCHEMA: Final = "pytest-latency/1"


class ResultError(ValueError):
    """A result file that cannot be read: missing, not JSON, or not our schema."""


class OtelBlock(TypedDict):
    name: str
    unit: str
    scale: float
    kind: NotRequired[str]
    attributes: NotRequired[dict[str, str]]


class MetricBlock(TypedDict):
    """One metric's distribution. A test's block holds exact percentiles of its raw values; a
    rollup's (group, session) comes from its HDR histogram and also carries `sum` and
    `out_of_range`, so shards merge exactly."""

    unit: str  # "us" | "tok"
    count: int
    p50: float
    p90: float
    p95: float
    p99: float
    min: float
    max: float
    mean: float
    hdr: str
    otel: OtelBlock | None
    sum: NotRequired[int]
    out_of_range: NotRequired[int]


class CacheRatioBlock(TypedDict):
    value: float | None
    cache_fields: str  # "reported" | "absent"
    calls_reporting: int
    read_tokens: int
    input_tokens: int


class FindingEntry(TypedDict):
    kind: str
    message: str
    evidence: dict[str, Any]
    scope: NotRequired[str]
    shard: NotRequired[int]


class BudgetEntry(TypedDict):
    expr: str
    verdict: str  # the statistics' word: pass | fail | inconclusive
    passed: bool  # the gate's decision, after the inconclusive policy
    status: NotRequired[str]  # how to count it: pass | fail | inconclusive
    estimate: float | None
    interval: list[float | None] | None
    n: int
    message: str
    metric: NotRequired[str]
    stat: NotRequired[str | None]
    op: NotRequired[str]
    threshold: NotRequired[float]
    threshold_text: NotRequired[str]
    estimate_text: NotRequired[str | None]
    interval_text: NotRequired[str | None]
    excess: NotRequired[float | None]
    confident: NotRequired[bool]
    shard: NotRequired[int]
    shards: NotRequired[int]  # a session budget judged again over this many merged shards
    evidence: NotRequired[dict[str, Any]]  # session budgets: `evidence.Evidence.to_dict`


class PhaseBlock(TypedDict):
    prefill_share: float | None
    decode_share: float | None
    n: int
    leaning: NotRequired[str | None]  # prefill | decode | balanced (diagnose's thresholds)


class PrefillBlock(TypedDict):
    points: list[list[Any]]  # [uncached tokens, ttft µs, read the cache]
    n: int
    slope_us_per_token: float | None
    intercept_us: float | None
    note: NotRequired[str]


class ScheduleBlock(TypedDict):
    """How an open loop's samples kept their schedule (`diagnose.LoadFigures`): how many had an
    intended start, how late they started (µs; median and worst), and how many were later
    than `threshold_us` (the `schedule_slipped` finding's threshold)."""

    samples: int
    late_p50_us: float | None
    late_max_us: float | None
    slipped: int
    threshold_us: float


class SplitBlock(TypedDict):
    """A test split across pytest-xdist workers (`split=True`): on how many shards its samples
    ran, and whether they ran together (a shard that waited for the others in vain ran alone)."""

    shards: int
    together: bool


class LoadEntry(TypedDict):
    """The load shape a test's samples ran under (`load.Load`; null fields where it gave none:
    a closed loop has no rate, no arrival), and what was measured of it: the most samples in
    flight at once, and under a rate the schedule kept. The `queue`, `ttft_intended` and
    `e2e_intended` blocks are in the test's `metrics`."""

    concurrency: int | None
    rate_per_s: float | None
    arrival: str | None
    burstiness: float | None
    seed: int | None
    in_flight_max: int | None
    schedule: NotRequired[ScheduleBlock]
    sweep: NotRequired[str]  # a level of a sweep: its node id with the level as `*`
    split: NotRequired[SplitBlock]


class TestEntry(TypedDict):
    nodeid: str
    outcome: str
    location: list[Any] | None
    policy: str | None
    samples: int
    warmup: int
    call_count: int
    unsampled_call_count: int
    error_count: int
    retries: int
    calls_per_sample: list[int]
    metrics: dict[str, MetricBlock]
    cache_read_ratio: CacheRatioBlock
    cost: NotRequired[dict[str, Any]]  # `_blocks.cost_block`; absent in older files
    usage_fields: dict[str, int]
    phase: PhaseBlock
    concurrency: NotRequired[dict[str, Any] | None]
    load: NotRequired[LoadEntry]  # only for a test run concurrently or under a rate
    budgets: list[BudgetEntry]
    flags: dict[str, int]
    flagged_count: NotRequired[int]  # calls with a distorting flag; absent in older files
    errors: dict[str, int]
    retried_errors: dict[str, int]
    error_kinds: dict[str, dict[str, Any]]
    timeline: dict[str, Any]
    prefill: PrefillBlock | None
    findings: list[FindingEntry]
    what_ifs: dict[str, Any]
    shard: NotRequired[int]
    regressions: NotRequired[list[str]]  # metrics the baseline comparison found slower
    recorded: NotRequired[dict[str, int]]  # values recorded by hand, by metric (`by_hand`)


class Rollup(TypedDict):
    """A group (`model=…`, `endpoint=…`, both) or the session: counters and HDR blocks."""

    model: NotRequired[str]
    endpoint: NotRequired[str]
    tests: int
    call_count: int
    error_count: int
    retries: int
    errors: dict[str, int]
    retried_errors: dict[str, int]
    flags: dict[str, int]
    flagged_count: NotRequired[int]  # calls with a distorting flag; absent in older files
    cache_read_ratio: CacheRatioBlock
    cost: NotRequired[dict[str, Any]]
    metrics: dict[str, MetricBlock]
    findings: list[FindingEntry]


class SessionBlock(Rollup):
    budgets: list[BudgetEntry]


class RunBlock(TypedDict):
    started: str | None
    duration_s: float | None
    partial: bool
    versions: dict[str, str]
    git: dict[str, Any] | None
    shards: int
    prices: NotRequired[dict[str, Any] | None]  # `pricing.PriceTable`; absent in older files


class ChangeEntry(TypedDict):
    """One regression or improvement (`results._compare.MetricChange` and its `message`)."""

    nodeid: str
    metric: str
    base_p50: float | None
    head_p50: float | None
    base_p95: float | None
    head_p95: float | None
    change_p50: float | None
    change_p95: float | None
    p_value: float | None
    regression: bool
    improvement: bool
    scope: NotRequired[str]
    n_base: NotRequired[int]
    n_head: NotRequired[int]
    p_adjusted: NotRequired[float | None]
    message: NotRequired[str]
    shard: NotRequired[int]


class BaselineBlock(TypedDict):
    path: str | None
    tolerance: float
    significance: float
    correction: str
    min_values: int
    compared: int
    only_base: NotRequired[int]
    only_head: NotRequired[int]
    regressions: list[ChangeEntry]
    improvements: list[ChangeEntry]


class ResultFile(TypedDict):
    schema: str
    run: RunBlock
    metrics_info: dict[str, dict[str, Any]]
    tests: list[TestEntry]
    groups: dict[str, Rollup]
    session: SessionBlock
    summary: dict[str, int]
    baseline: NotRequired[BaselineBlock]


__all__ = [
    "SCHEMA",
    "BaselineBlock",
    "BudgetEntry",
    "CacheRatioBlock",
    "ChangeEntry",
    "FindingEntry",
    "MetricBlock",
    "PhaseBlock",
    "PrefillBlock",
    "ResultError",
    "ResultFile",
    "Rollup",
    "RunBlock",
    "SessionBlock",
    "TestEntry",
]
