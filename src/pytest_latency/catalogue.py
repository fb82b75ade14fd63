"""The metric catalogue: every metric name the product exposes, and what kind of value it is.

Owns the names (they are public API, see docs/metrics.md), each metric's scope (per call, per
chunk, per sample, or an aggregate over calls), its dimension (time, tokens, ratio, count), the
unit its values are written in, and where it lands in the OpenTelemetry GenAI conventions. Every
list of metrics elsewhere (the budget grammar, the pools, the result file's blocks, the compare
command) is derived from it, so a new metric is one line here plus its computation. Likewise the
per-call flags (`FLAG_SPECS`): their names (a `CallMetrics` field each, and a count in the
result file's `flags`), how the outputs word them, and which of them `--latency-flagged` acts
on. It is a leaf: stdlib only, imports nothing from the package.
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
    MONEY = "money"  # stored in micro-US-dollars (µ$), as times are in µs; budgets write usd or $


@dataclass(frozen=True, slots=True)
class OtelMapping:
    """Where a metric lands in the OpenTelemetry GenAI semantic conventions (status:
    Development). `scale` converts our value to the OTel unit (µs → s is 1e-6). `kind` is
    "metric" (a histogram instrument) or "attribute" (a span/usage attribute, no instrument)."""

    name: str
    unit: str
    scale: float
    kind: str = "metric"
    attributes: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "unit": self.unit, "scale": self.scale}
        if self.kind != "metric":
            out["kind"] = self.kind
        if self.attributes:
            out["attributes"] = dict(self.attributes)
        return out


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    scope: Scope
    dimension: Dimension
    summary: str
    # ttfb and ttfo have no OTel counterpart and map to nothing rather than to a near miss.
    otel: OtelMapping | None = None
    # Whether a budget's `{model=...}` filters apply: they select calls, and a metric of the
    # whole sample (`turn`, its wall time) is no call's.
    filterable: bool = True

    @property
    def unit(self) -> str:
        """The unit the result file writes its values in: `us` for time, `tok` for tokens,
        `microusd` (millionths of a US dollar) for money."""
        if self.dimension is Dimension.TOKENS:
            return "tok"
        return "microusd" if self.dimension is Dimension.MONEY else "us"

    @property
    def takes_sum(self) -> bool:
        """Whether `.sum` means something: a run's tokens and dollars add up, its times do not."""
        return self.dimension in (Dimension.TOKENS, Dimension.MONEY) and self.scope is Scope.CALL

    @property
    def takes_stat(self) -> bool:
        """Distributions take a statistic (`ttft.p95`); aggregates are one number (`error_rate`)."""
        return self.scope is not Scope.AGGREGATE


_TOKEN_USAGE = "gen_ai.client.token.usage"


def _seconds(name: str) -> OtelMapping:
    return OtelMapping(name, "s", 1e-6)


def _tokens(kind: str) -> OtelMapping:
    return OtelMapping(_TOKEN_USAGE, "{token}", 1.0, attributes=(("gen_ai.token.type", kind),))


# The per-call times measured from a hand-off to the transport. The public names are the call as
# the application saw it: from its first attempt's hand-off, so an SDK's back-off and the attempts
# it retried count (docs/metrics.md, "Retries"). `attempt_<name>` is the final attempt's own
# figure, from that attempt's hand-off: what the server did on the attempt that answered.
HANDOFF_TIMES = ("ttfb", "ttft", "ttfo", "e2e")
# attempt_ttft → ttft, ...: each attempt metric and the call metric it is the final attempt's
# own figure of (a result file leaves out an attempt block that repeats its call metric's).
ATTEMPT_METRICS = {f"attempt_{name}": name for name in HANDOFF_TIMES}


# Under an open-loop rate (docs/load.md): `queue` is the intended start of a call's sample → the
# call's first hand-off (coordinated omission: the wait a closed loop never sees), and the
# `*_intended` views add it to the call's own time, so they run from the intended start.
QUEUE = "queue"
INTENDED_METRICS = {"ttft_intended": "ttft", "e2e_intended": "e2e"}


def _attempt(name: str) -> MetricSpec:
    # No OTel counterpart: gen_ai.client.operation.* time the operation (the call), not one try.
    return MetricSpec(
        f"attempt_{name}",
        Scope.CALL,
        Dimension.TIME,
        f"{name} of the final attempt, from its own hand-off",
    )


_SPECS = (
    MetricSpec("ttfb", Scope.CALL, Dimension.TIME, "request sent → response headers"),
    MetricSpec(
        "ttft",
        Scope.CALL,
        Dimension.TIME,
        "request sent → first content event",
        _seconds("gen_ai.client.operation.time_to_first_chunk"),
    ),
    MetricSpec("ttfo", Scope.CALL, Dimension.TIME, "request sent → first non-reasoning output"),
    MetricSpec(
        "e2e",
        Scope.CALL,
        Dimension.TIME,
        "request sent → last content event",
        _seconds("gen_ai.client.operation.duration"),
    ),
    MetricSpec(
        "tpot",
        Scope.CALL,
        Dimension.TIME,
        "(e2e − ttft) / (output_tokens − 1)",
        _seconds("gen_ai.server.time_per_output_token"),
    ),
    MetricSpec(
        "itl",
        Scope.CHUNK,
        Dimension.TIME,
        "gap between successive content events",
        _seconds("gen_ai.client.operation.time_per_output_chunk"),
    ),
    *(_attempt(name) for name in HANDOFF_TIMES),
    MetricSpec(
        QUEUE,
        Scope.CALL,
        Dimension.TIME,
        "intended start of the sample → hand-off (open loop)",
    ),
    MetricSpec(
        "ttft_intended",
        Scope.CALL,
        Dimension.TIME,
        "intended start of the sample → first content event (open loop)",
    ),
    MetricSpec(
        "e2e_intended",
        Scope.CALL,
        Dimension.TIME,
        "intended start of the sample → last content event (open loop)",
    ),
    MetricSpec(
        "input_tokens",
        Scope.CALL,
        Dimension.TOKENS,
        "all prompt tokens, cached included",
        _tokens("input"),
    ),
    MetricSpec(
        "output_tokens",
        Scope.CALL,
        Dimension.TOKENS,
        "output tokens the server reported",
        _tokens("output"),
    ),
    MetricSpec(
        "cache_read_tokens",
        Scope.CALL,
        Dimension.TOKENS,
        "prompt tokens read from cache",
        OtelMapping("gen_ai.usage.cache_read.input_tokens", "{token}", 1.0, kind="attribute"),
    ),
    MetricSpec(
        "cache_write_tokens",
        Scope.CALL,
        Dimension.TOKENS,
        "prompt tokens written to cache",
        OtelMapping("gen_ai.usage.cache_creation.input_tokens", "{token}", 1.0, kind="attribute"),
    ),
    # No OTel counterpart (the GenAI conventions price nothing). Priced from the call's usage by
    # `pricing` (genai-prices, or budgets.toml's [prices]); absent when the model has no price.
    MetricSpec(
        "cost",
        Scope.CALL,
        Dimension.MONEY,
        "price of the call's usage: input, output, cache reads and writes",
    ),
    MetricSpec("cache_read_ratio", Scope.AGGREGATE, Dimension.RATIO, "Σ cache reads / Σ input"),
    MetricSpec("error_rate", Scope.AGGREGATE, Dimension.RATIO, "failed calls / all calls"),
    MetricSpec("calls", Scope.SAMPLE, Dimension.COUNT, "LLM calls made by one sample"),
    MetricSpec("retries", Scope.AGGREGATE, Dimension.COUNT, "extra attempts the SDK made"),
    # No OTel counterpart: gen_ai.client.operation.duration is one call's; an agent turn spans
    # several (OTel's invoke_agent span has no metric).
    MetricSpec("turn", Scope.SAMPLE, Dimension.TIME, "wall time of one sample", filterable=False),
)

METRICS: dict[str, MetricSpec] = {spec.name: spec for spec in _SPECS}

# A call's `price_source` (`pricing`): the table that priced it, or why none did.
PRICED_BY_TABLE = "genai-prices"
PRICED_BY_OVERRIDE = "budgets.toml"
NO_PRICE = "no price"  # the model is in neither table
NO_USAGE = "no usage"  # the response reported no input or output token count

TIME_METRICS = tuple(s.name for s in _SPECS if s.dimension is Dimension.TIME)
TOKEN_METRICS = tuple(s.name for s in _SPECS if s.dimension is Dimension.TOKENS)
# The metrics whose values come from calls (every per-call and per-chunk metric, times first):
# what the groups' rollups count per model and endpoint.
POOLED_METRICS = tuple(s.name for s in _SPECS if s.scope in (Scope.CALL, Scope.CHUNK))
# The per-sample times: one value per kept sample, measured around the sample (`turn`).
SAMPLE_TIME_METRICS = tuple(
    s.name for s in _SPECS if s.scope is Scope.SAMPLE and s.dimension is Dimension.TIME
)
# What a test's result entry writes a distribution block for (the pooled metrics, then the
# per-sample times), and the session too. `calls` is a short list of small integers, written as
# the entry's `calls_per_sample` instead.
BLOCK_METRICS = POOLED_METRICS + SAMPLE_TIME_METRICS
# The timing metrics `compare` and the baseline gate hold two runs to.
COMPARED_METRICS = ("ttft", "tpot", "itl", "e2e", "turn")
OTEL = {s.name: s.otel for s in _SPECS if s.otel is not None}


@dataclass(frozen=True, slots=True)
class FlagSpec:
    """A per-call flag: a boolean `CallMetrics` field named `name`. `distorting` flags are those
    whose timings do not measure the server's whole response: `--latency-flagged` keeps, excludes
    or fails on them (docs/budgets.md, "Flagged calls")."""

    name: str
    label: str  # how the outputs name it
    why: str  # what it means for the call's numbers, one clause
    distorting: bool

    @property
    def text(self) -> str:
        return f"{self.label} ({self.why})"


# In the order the result file's `flags` lists them (new flags last: older files lack them).
FLAG_SPECS = (
    FlagSpec(
        "consumer_bound",
        "consumer-bound",
        "the test read the stream slower than it arrived",
        distorting=True,
    ),
    FlagSpec(
        "client_saturated",
        "client-saturated",
        "the event loop was too busy to stamp the call on time",
        distorting=True,
    ),
    FlagSpec("incomplete", "incomplete", "body not read to the end", distorting=False),
    FlagSpec("opaque", "opaque", "undecodable body: no token timings", distorting=False),
    FlagSpec(
        "capped",
        "capped",
        "past a per-call keep limit: its metrics cover only the part kept",
        distorting=True,
    ),
    # Not the test's code but the machine (issue #14 item 11): the process waited for a CPU
    # while the call was in flight; told apart from consumer_bound by the thread's run-queue wait.
    FlagSpec(
        "cpu_starved",
        "CPU-starved",
        "the process waited for a CPU: a busy machine, not the test's code",
        distorting=True,
    ),
    # Not the test body's per-chunk work either: CPython's garbage collector held the process
    # (gc_pauses) while the call's data waited; told apart from consumer_bound by the pause.
    FlagSpec(
        "gc_paused",
        "GC-paused",
        "garbage collection held the process while the call's data waited",
        distorting=True,
    ),
)
FLAGS = {spec.name: spec for spec in FLAG_SPECS}
CALL_FLAGS = tuple(FLAGS)
DISTORTING_FLAGS = tuple(s.name for s in FLAG_SPECS if s.distorting)
