"""Recording: one test's captured calls, grouped into samples and attempts.

Owns the per-test log that capture's records are routed into: which sample (one run of the test
body) each attempt started in, whether that sample was warmup, manual values recorded by the test,
and the grouping of SDK retries into one logical call. It turns the log into plain, JSON-able data
that travels on the test report (and so across pytest-xdist) and into the public `latency`
fixture object. May import `wire`, `metrics`, `catalogue`; never pytest.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_latency.catalogue import METRICS, Scope
from pytest_latency.wire import WireRecord

if TYPE_CHECKING:
    from pytest_latency.metrics import CallMetrics

# Sample index of attempts started outside any sample (fixture setup and teardown, or a body that
# marks its own samples, between them): kept and counted (the result file's
# unsampled_call_count), never budgeted.
OUTSIDE = -1


@dataclass(slots=True)
class _Entry:
    sample: int
    warmup: bool
    record: WireRecord


def _call_metrics_class() -> type[CallMetrics]:
    # Imported on first use: every test gets a Recording, most never parse a call.
    from pytest_latency.metrics import CallMetrics

    return CallMetrics


@dataclass(frozen=True, slots=True)
class Call:
    """One logical LLM call: its attempts (SDK retries) in order; the last one is the outcome."""

    sample: int
    warmup: bool
    attempts: tuple[CallMetrics, ...]

    @property
    def final(self) -> CallMetrics:
        return self.attempts[-1]

    @property
    def retries(self) -> int:
        return len(self.attempts) - 1

    @property
    def failed(self) -> bool:
        return self.final.error is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "sample": self.sample,
            "warmup": self.warmup,
            "attempts": [a.to_dict() for a in self.attempts],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Call:
        return cls(
            sample=int(data["sample"]),
            warmup=bool(data["warmup"]),
            attempts=tuple(_call_metrics_class().from_dict(a) for a in data["attempts"]),
        )


@dataclass(slots=True)
class Recording:
    """The live log of one test. `sink` is called from any thread or task; list appends are
    atomic under the GIL, and the sample counters change only between samples."""

    nodeid: str
    entries: list[_Entry] = field(default_factory=list)
    manual: list[tuple[int, bool, str, float]] = field(default_factory=list)
    sample: int = OUTSIDE
    warmup: bool = False
    samples_run: int = 0
    warmups_run: int = 0
    # Entries and manual values a report has carried already: what comes after the call report
    # (fixture teardown) travels on the teardown report.
    reported: int = 0
    reported_manual: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sink(self, record: WireRecord) -> None:
        record.owner = self.nodeid
        self.entries.append(_Entry(self.sample, self.warmup, record))

    def begin_sample(self, *, warmup: bool) -> None:
        with self._lock:
            self.warmup = warmup
            if warmup:
                self.warmups_run += 1
                self.sample = -1 - self.warmups_run  # warmup samples: -2, -3, ...
            else:
                self.sample = self.samples_run
                self.samples_run += 1

    def end_sample(self) -> None:
        self.sample = OUTSIDE
        self.warmup = False

    def record_value(self, metric: str, value: float) -> None:
        spec = METRICS.get(metric)
        if spec is None:
            raise ValueError(f"unknown metric {metric!r}; valid: {', '.join(METRICS)}")
        if spec.scope is Scope.AGGREGATE:
            raise ValueError(f"{metric!r} is computed over calls and cannot be recorded by hand")
        sample = self.sample if self.sample != OUTSIDE else max(self.samples_run - 1, 0)
        self.manual.append((sample, self.warmup, metric, float(value)))

    def calls(self, entries: list[_Entry] | None = None) -> list[Call]:
        """Group attempts (of `entries`, default all) into calls: attempt n > 0 belongs to the
        latest call to the same URL with the same request body whose last attempt is n − 1 (the
        SDKs resend the same bytes)."""
        entries = list(self.entries) if entries is None else entries
        if not entries:
            return []
        from pytest_latency.metrics import call_metrics

        calls: list[list[tuple[_Entry, CallMetrics]]] = []
        open_by_key: dict[tuple[str, bytes], list[int]] = {}
        for entry in entries:
            record = entry.record
            key = (record.url, hashlib.blake2b(record.request_body, digest_size=16).digest())
            metrics = call_metrics(record)
            target: int | None = None
            if record.attempt > 0:
                for index in reversed(open_by_key.get(key, [])):
                    if calls[index][-1][0].record.attempt == record.attempt - 1:
                        target = index
                        break
            if target is None:
                calls.append([(entry, metrics)])
                open_by_key.setdefault(key, []).append(len(calls) - 1)
            else:
                calls[target].append((entry, metrics))
        return [
            Call(
                sample=group[0][0].sample,
                warmup=group[0][0].warmup,
                attempts=tuple(m for _, m in group),
            )
            for group in calls
        ]

    def to_data(self) -> dict[str, Any]:
        """Plain data for the test report: what the controller aggregates and the files keep."""
        return self._data(list(self.entries), self.manual)

    @property
    def unreported(self) -> bool:
        return len(self.entries) > self.reported or len(self.manual) > self.reported_manual

    def report_data(self) -> dict[str, Any]:
        """`to_data()` of what no report has carried yet (everything, the first time); from now
        on it counts as reported."""
        entries = self.entries[self.reported :]  # copies: threads may still append
        manual = self.manual[self.reported_manual :]
        self.reported += len(entries)
        self.reported_manual += len(manual)
        return self._data(entries, manual)

    def _data(
        self, entries: list[_Entry], manual: list[tuple[int, bool, str, float]]
    ) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "samples": self.samples_run,
            "warmup": self.warmups_run,
            "calls": [c.to_dict() for c in self.calls(entries)],
            "manual": [list(m) for m in manual],
        }


class LatencyRecorder:
    """The current test's recorder, handed out by the `latency` fixture.

    `calls` are the logical calls of the kept samples so far (warmup and fixture-phase calls
    excluded), `record()` adds a value measured by hand, and `sample()` marks one sample
    explicitly in a test that loops by itself::

        def test_loop(latency, openai_client):
            for _ in range(20):
                with latency.sample():
                    openai_client.chat.completions.create(...)
    """

    def __init__(self, recording: Recording) -> None:
        self._recording = recording

    @property
    def nodeid(self) -> str:
        return self._recording.nodeid

    @property
    def calls(self) -> list[Call]:
        return [c for c in self._recording.calls() if c.sample >= 0 and not c.warmup]

    @property
    def all_calls(self) -> list[Call]:
        """Every call, warmup and fixture-phase ones included."""
        return self._recording.calls()

    def record(self, metric: str, value: float, unit: str = "s") -> None:
        """Record a value measured by hand; times take a unit (`s`, `ms`, `us`)."""
        scale = _TIME_UNITS.get(unit)
        if scale is None:
            raise ValueError(f"unknown unit {unit!r}; valid: {', '.join(_TIME_UNITS)}")
        if METRICS.get(metric) and METRICS[metric].dimension.value == "time":
            value = value * scale
        self._recording.record_value(metric, value)

    @contextlib.contextmanager
    def sample(self, *, warmup: bool = False) -> Iterator[None]:
        """Mark one run of the measured code as a sample (or a warmup sample, not budgeted)."""
        self._recording.begin_sample(warmup=warmup)
        try:
            yield
        finally:
            self._recording.end_sample()

    @contextlib.contextmanager
    def timer(self, metric: str = "e2e") -> Iterator[None]:
        """Time a block by hand and record it under `metric`."""
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            self._recording.record_value(metric, (time.perf_counter_ns() - start) / 1000)


_TIME_UNITS = {"s": 1e6, "ms": 1e3, "us": 1.0, "µs": 1.0, "ns": 1e-3}
