"""The units a test's measurements are made of: a logical call, a value recorded by hand, a sample.

Owns `Call` (one LLM call: its attempts, SDK retries included, each a `CallMetrics` computed once
when its wire record finished, and how long after the call's first hand-off each was handed off),
`metric_value` (the one reading of a per-call metric off a call: the application's view for the
public times, the final attempt's own for `attempt_*`, from the intended start of its sample for
`queue` and the `*_intended` views of an open loop), `ManualValue` (a value the test recorded
itself), `SampleSpan` (when one sample, one run of the test body, started and ended: its `turn`),
which of them a budget pools (`kept`: a call, value or sample of a kept, non-warmup sample) and
their plain-data form on the test report. May import `metrics` (for the `CallMetrics` type) and
`catalogue`; never pytest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

from pytest_latency.catalogue import ATTEMPT_METRICS, HANDOFF_TIMES, INTENDED_METRICS, QUEUE

if TYPE_CHECKING:
    from pytest_latency.metrics import CallMetrics

# Sample index of attempts started outside any sample (fixture setup and teardown, or a body that
# marks its own samples, between them): kept and counted (the result file's
# unsampled_call_count), never budgeted.
OUTSIDE = -1

# The plain-data form of a call on the test report (JSON-able; pytest-xdist forwards it as is).
CallWire = dict[str, object]


def is_kept(sample: int, warmup: bool) -> bool:
    """Whether what happened in `sample` is budgeted: a kept sample's, not a warmup's and not
    outside every sample (fixtures)."""
    return sample >= 0 and not warmup


class Reading(NamedTuple):
    """How a per-call metric is read off a call's final attempt: its `CallMetrics` field, plus
    the call's wait before that attempt (`waited_us`) when `waits`, plus the call's queue
    (`queued_us`, absent in a closed loop) when `queued`."""

    field: str
    waits: bool
    queued: bool = False

    def of(self, final: CallMetrics) -> float | None:
        value = getattr(final, self.field)
        if value is None:
            return None
        value = float(value)
        if self.waits:
            value += final.waited_us
        if self.queued:
            if final.queued_us is None:
                return None  # no intended start: a closed loop has no intended-start view
            value += final.queued_us
        return value


_QUEUE = Reading("queued_us", False)


def reading(metric: str) -> Reading:
    """How a per-call metric is read: the public times (`ttft`, ...) are the application's view,
    from the call's first hand-off; `attempt_ttft` and the rest are the field as measured, from
    the final attempt's own hand-off; `queue` is the intended start of the call's sample to the
    call's first hand-off, and `ttft_intended` and the rest add it to the public time."""
    own = ATTEMPT_METRICS.get(metric)
    if own is not None:
        return Reading(own, False)
    if metric == QUEUE:
        return _QUEUE
    base = INTENDED_METRICS.get(metric)
    if base is not None:
        return Reading(base, True, True)
    return Reading(metric, metric in HANDOFF_TIMES)


def metric_value(final: CallMetrics, metric: str) -> float | None:
    """A per-call metric of the call whose final attempt is `final`; None when absent. Every
    reader of a call's metric value (pools, `good(...)`) goes through here or `reading`."""
    return reading(metric).of(final)


@dataclass(frozen=True, slots=True)
class Call:
    """One logical LLM call: its attempts (SDK retries) in order; the last one is the outcome.
    Build it with `Call.of`, which stamps each attempt's wait since the first hand-off."""

    sample: int
    warmup: bool
    attempts: tuple[CallMetrics, ...]

    @classmethod
    def of(
        cls,
        sample: int,
        warmup: bool,
        attempts: Sequence[CallMetrics],
        *,
        intended_ns: int | None = None,
    ) -> Call:
        """A call of `attempts` (in order), each stamped with `waited_us`: how long after the
        first one's hand-off it was handed to the transport (the attempts before it and the
        SDK's back-off), from the attempts' own `t_start_ns`, so a wire form written without
        the field reads the same. With `intended_ns` (its sample's intended start under an
        open-loop rate) each is stamped with `queued_us` too: that start to the call's first
        hand-off; without it, what the attempts carry stays (a wire form read back)."""
        first = attempts[0].t_start_ns
        queued = None if intended_ns is None else (first - intended_ns) / 1000
        stamped = []
        for attempt in attempts:
            waited = (attempt.t_start_ns - first) / 1000
            if attempt.waited_us != waited:
                attempt = replace(attempt, waited_us=waited)
            if queued is not None and attempt.queued_us != queued:
                attempt = replace(attempt, queued_us=queued)
            stamped.append(attempt)
        return cls(sample, warmup, tuple(stamped))

    def value(self, metric: str) -> float | None:
        """A per-call metric (`ttft`, `attempt_ttft`, `output_tokens`, ...) of this call, as
        budgets read it: `metric_value` of its final attempt."""
        return metric_value(self.final, metric)

    @property
    def final(self) -> CallMetrics:
        return self.attempts[-1]

    @property
    def retries(self) -> int:
        return len(self.attempts) - 1

    @property
    def failed(self) -> bool:
        return self.final.error is not None

    @property
    def kept(self) -> bool:
        """Made in a kept sample (not warmup, not a fixture's): what budgets pool."""
        return is_kept(self.sample, self.warmup)

    def to_wire(self, *, fingerprints: bool = True) -> CallWire:
        return {
            "sample": self.sample,
            "warmup": self.warmup,
            "attempts": [a.to_dict(fingerprints=fingerprints) for a in self.attempts],
        }

    @classmethod
    def from_wire(cls, data: CallWire) -> Call:
        from pytest_latency.metrics import CallMetrics

        attempts = data["attempts"]
        assert isinstance(attempts, list)
        return cls.of(
            int(data["sample"]),  # type: ignore[call-overload]
            bool(data["warmup"]),
            [CallMetrics.from_dict(a) for a in attempts],
        )


class ManualValue(NamedTuple):
    """A value the test measured itself (`latency.record`, `latency.timer`), in the metric's
    base unit (µs for time)."""

    sample: int
    warmup: bool
    metric: str
    value: float

    @property
    def kept(self) -> bool:
        return is_kept(self.sample, self.warmup)


class SampleSpan(NamedTuple):
    """One sample's run, from its start to its end in `perf_counter_ns` readings (the clock
    capture stamps calls with): its wall time is the `turn` metric. Under an open-loop rate,
    `intended_ns` is when the schedule meant it to start (None otherwise)."""

    sample: int
    warmup: bool
    start_ns: int
    end_ns: int
    intended_ns: int | None = None

    @property
    def kept(self) -> bool:
        return is_kept(self.sample, self.warmup)

    @property
    def turn(self) -> float:
        """The sample's wall time in µs (the base unit of time metrics)."""
        return (self.end_ns - self.start_ns) / 1000

    @property
    def late(self) -> float | None:
        """How long after its intended start the sample started, in µs (None: no schedule)."""
        return None if self.intended_ns is None else (self.start_ns - self.intended_ns) / 1000
