"""The units a test's measurements are made of: a logical call and a value recorded by hand.

Owns `Call` (one LLM call: its attempts, SDK retries included, each a `CallMetrics` computed once
when its wire record finished, and how long after the call's first hand-off each was handed off),
`metric_value` (the one reading of a per-call metric off a call: the application's view for the
public times, the final attempt's own for `attempt_*`), `ManualValue` (a value the test recorded
itself), which of them a budget pools (`kept`: a call or value of a kept, non-warmup sample) and
their plain-data form on the test report. May import `metrics` (for the `CallMetrics` type) and
`catalogue`; never pytest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

from pytest_latency.catalogue import ATTEMPT_METRICS, HANDOFF_TIMES

if TYPE_CHECKING:
    from pytest_latency.metrics import CallMetrics

# Sample index of attempts started outside any sample (fixture setup and teardown, or a body that
# marks its own samples, between them): kept and counted (the result file's
# unsampled_call_count), never budgeted.
OUTSIDE = -1

# The plain-data form of a call on the test report (JSON-able; pytest-xdist forwards it as is).
CallWire = dict[str, object]


def reading(metric: str) -> tuple[str, bool]:
    """Which `CallMetrics` field a per-call metric reads, and whether the call's wait before
    that attempt (`waited_us`) is added: the public times (`ttft`, ...) are the application's
    view, from the call's first hand-off; `attempt_ttft` and the rest are the field as
    measured, from the final attempt's own hand-off."""
    own = ATTEMPT_METRICS.get(metric)
    if own is not None:
        return own, False
    return metric, metric in HANDOFF_TIMES


def metric_value(final: CallMetrics, metric: str) -> float | None:
    """A per-call metric of the call whose final attempt is `final`; None when absent. Every
    reader of a call's metric value (pools, `good(...)`) goes through here or `reading`."""
    name, waits = reading(metric)
    value = getattr(final, name)
    if value is None:
        return None
    return value + final.waited_us if waits else float(value)


@dataclass(frozen=True, slots=True)
class Call:
    """One logical LLM call: its attempts (SDK retries) in order; the last one is the outcome.
    Build it with `Call.of`, which stamps each attempt's wait since the first hand-off."""

    sample: int
    warmup: bool
    attempts: tuple[CallMetrics, ...]

    @classmethod
    def of(cls, sample: int, warmup: bool, attempts: Sequence[CallMetrics]) -> Call:
        """A call of `attempts` (in order), each stamped with `waited_us`: how long after the
        first one's hand-off it was handed to the transport (the attempts before it and the
        SDK's back-off), from the attempts' own `t_start_ns`, so a wire form written without
        the field reads the same."""
        first = attempts[0].t_start_ns
        stamped = []
        for attempt in attempts:
            waited = (attempt.t_start_ns - first) / 1000
            if attempt.waited_us != waited:
                attempt = replace(attempt, waited_us=waited)
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
        return self.sample >= 0 and not self.warmup

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
        return self.sample >= 0 and not self.warmup
