"""Recording: one test's captured calls, grouped into samples and attempts.

Owns the per-test log that capture's records are routed into: which sample (one run of the test
body) each attempt started in, whether that sample was warmup, when each sample started and ended
(its `turn`, read from the clock capture stamps calls with) and, under an open-loop rate, when it
was meant to start, manual values recorded by the test, and the grouping of SDK retries into one
logical call. Samples may overlap (`latency(concurrency=...)`): each run of the body the plugin
starts in its own thread or task carries its sample in a context variable (`run`), and a call made
where none is set (a thread the body started itself) falls back to the run begun last. Each
attempt's `CallMetrics` is computed once, when its wire record has finished, and kept; the grouped
calls are kept too until a new attempt arrives, so reading `latency.calls` in a loop, or judging
after every look of sequential sampling, parses no call twice. Also the public `latency` fixture
object. May import `wire`, `metrics`, `calls`, `catalogue`; never pytest.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from pytest_latency.calls import OUTSIDE, Call, ManualValue, SampleSpan
from pytest_latency.catalogue import METRICS, Dimension, Scope
from pytest_latency.wire import WireRecord

if TYPE_CHECKING:
    from pytest_latency.metrics import CallMetrics
    from pytest_latency.pricing import Prices

__all__ = ["OUTSIDE", "LatencyRecorder", "Measured", "Recording"]


def _finished(record: WireRecord) -> bool:
    # Nothing more is stamped on a record once its body ended, it closed or it failed; and a
    # record cut off by its test's end is measured as it was then, whatever it does later.
    return (
        record.t_eof_ns is not None
        or record.t_closed_ns is not None
        or record.error is not None
        or record.t_cut_ns is not None
    )


def _settled(metrics: CallMetrics, record: WireRecord) -> bool:
    """Whether the event-loop lag log shared by an async record can still change its metrics:
    a wake-up logged later than the call's end may still have been late across it, until one
    wake-up lands past the end (ticks are back to back: every later one starts after it)."""
    log = record.loop_lag
    return log is None or (len(log) > 0 and log.wakes_ns[-1] >= metrics.t_end_ns)


@dataclass(slots=True)
class _Entry:
    sample: int
    warmup: bool
    record: WireRecord
    # When the sample this attempt was made in was meant to start (an open loop's schedule).
    intended_ns: int | None = None
    # Filled on first use: the metrics once the record has finished (a record still streaming
    # is parsed afresh each time), and the retry-grouping key.
    metrics: CallMetrics | None = None
    key: tuple[str, bytes] | None = None

    def call_metrics(self) -> tuple[CallMetrics, bool]:
        """The attempt's metrics, and whether they are final (kept from now on)."""
        if self.metrics is not None:
            return self.metrics, True
        from pytest_latency.metrics import call_metrics

        finished = _finished(self.record)  # read first: a stamp may land while parsing
        metrics = call_metrics(self.record)
        if finished and _settled(metrics, self.record):
            self.metrics = metrics
            return metrics, True
        return metrics, False

    def retry_key(self) -> tuple[str, bytes]:
        if self.key is None:
            body = hashlib.blake2b(self.record.request_body, digest_size=16).digest()
            self.key = (self.record.url, body)
        return self.key


class Measured(NamedTuple):
    """What a recording holds (or what no report has carried yet): typed, not yet judged."""

    nodeid: str
    samples: int
    warmup: int
    calls: tuple[Call, ...]
    manual: tuple[ManualValue, ...]
    spans: tuple[SampleSpan, ...] = ()


def _answered(record: WireRecord) -> bool:
    """The attempt got a success status and no error: no SDK retries it."""
    status = record.status
    return status is not None and status < 400 and record.error is None


def _group(entries: Sequence[_Entry]) -> tuple[tuple[Call, ...], bool]:
    """Group attempts into calls: attempt n > 0 belongs to the latest call to the same URL with
    the same request body whose last attempt is n − 1 and was not answered (the SDKs resend
    the same bytes after a failure). Also says whether every attempt had finished (only then
    can the grouping be kept)."""
    groups: list[list[_Entry]] = []
    open_by_key: dict[tuple[str, bytes], list[int]] = {}
    for entry in entries:
        key = entry.retry_key()
        attempt = entry.record.attempt
        target: int | None = None
        if attempt > 0:
            for index in reversed(open_by_key.get(key, [])):
                last = groups[index][-1].record
                # The SDKs retry only an attempt that failed: identical requests in flight
                # together, one turned away and one served, must not make the first's retry
                # the second's.
                if last.attempt == attempt - 1 and not _answered(last):
                    target = index
                    break
        if target is None:
            groups.append([entry])
            open_by_key.setdefault(key, []).append(len(groups) - 1)
        else:
            groups[target].append(entry)
    final = True
    calls: list[Call] = []
    for group in groups:
        attempts = []
        for entry in group:
            metrics, kept = entry.call_metrics()
            attempts.append(metrics)
            final = final and kept
        first = group[0]
        calls.append(Call.of(first.sample, first.warmup, attempts, intended_ns=first.intended_ns))
    return tuple(calls), final


# `_Run.sample` while the plugin's run of the body is open and has no number yet: the run becomes
# a sample when it first gets a call or a value of its own, or when it ends without the body
# having marked samples itself (an empty run still counts as one sample of 0 calls).
_UNNUMBERED = -1000


@dataclass(slots=True)
class _Run:
    """Where a run of the body is: the sample open in it (or OUTSIDE), whether that is a warmup
    one, when it started and was meant to start, and the run around it (open, a warmup run,
    and whether the body marked samples of its own in it)."""

    sample: int = OUTSIDE
    warmup: bool = False
    started_ns: int = 0
    intended_ns: int | None = None
    open: bool = False
    open_warmup: bool = False
    marked: bool = False


# The run of the body the plugin started in this thread or task (`Recording.run`), with its
# recording: a concurrent sample's calls are its own, whatever else is in flight.
_CURRENT: contextvars.ContextVar[tuple[Recording, _Run] | None] = contextvars.ContextVar(
    "pytest_latency_run", default=None
)


@dataclass(slots=True)
class Recording:
    """The live log of one test. `sink` is called from any thread or task; list appends are
    atomic under the GIL, and the sample counters change only between samples (or under the
    lock, when a run of the body is numbered by its first call).

    Two things open a sample: the plugin running the test body (`begin_run`, each run of a
    budgeted test's loop, or an unplanned test's one run) and the body itself marking one
    (`begin_sample`, `latency.sample()`). A body that marks its own samples makes the run
    around them no sample of its own unless something lands in it outside them: ten
    `latency.sample()` blocks are ten samples, not eleven with an empty first one."""

    nodeid: str
    # What prices the calls when they are judged or reported (`Router.prices`: the price
    # table is made then, never on the routing path of a call in flight); None: unpriced.
    prices: Callable[[], Prices] | None = None
    entries: list[_Entry] = field(default_factory=list)
    manual: list[ManualValue] = field(default_factory=list)
    # The samples that have ended, in the order they ended.
    spans: list[SampleSpan] = field(default_factory=list)
    samples_run: int = 0
    warmups_run: int = 0
    # Entries, manual values and spans a report has carried already: what comes after the call
    # report (fixture teardown) travels on the teardown report.
    reported: int = 0
    reported_manual: int = 0
    reported_spans: int = 0
    # The grouped calls of the first `_grouped_upto` entries, while all of them had finished.
    _grouped: tuple[Call, ...] = ()
    _grouped_upto: int = -1
    # The run outside any `run()` context (an unplanned test's body, the body's own samples in
    # a sequential loop, fixtures), and the concurrent runs open now, in the order they began:
    # a call made where no run is set belongs to the last of them (a thread the body started).
    _main: _Run = field(default_factory=_Run)
    _open: list[_Run] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _here(self) -> _Run:
        """The run a call or value made now belongs to."""
        current = _CURRENT.get()
        if current is not None and current[0] is self:
            return current[1]
        open_runs = self._open
        return open_runs[-1] if open_runs else self._main

    @property
    def sample(self) -> int:
        """The sample open where this is read (OUTSIDE when none is; negative for warmup)."""
        return self._here().sample

    def sink(self, record: WireRecord) -> None:
        record.owner = self.nodeid
        run = self._here()
        sample = run.sample
        if sample == _UNNUMBERED:
            sample = self._number_run(run)
        self.entries.append(_Entry(sample, run.warmup, record, run.intended_ns))

    def _next_index(self, *, warmup: bool) -> int:
        if warmup:
            self.warmups_run += 1
            return -1 - self.warmups_run  # warmup samples: -2, -3, ...
        self.samples_run += 1
        return self.samples_run - 1

    def _number_run(self, run: _Run) -> int:
        """The open run's sample index, given now (its first call or value)."""
        with self._lock:
            if run.sample == _UNNUMBERED:
                run.sample = self._next_index(warmup=run.open_warmup)
            return run.sample

    def begin_run(self, *, warmup: bool, started_ns: int | None = None) -> None:
        """The plugin runs the test body once: a sample, numbered when it is first used. It
        starts now, or at `started_ns`: an unplanned test's body starts before its first call
        makes the recording."""
        now = time.perf_counter_ns()
        with self._lock:
            self._begin(self._main, warmup, now if started_ns is None else started_ns, None)

    def end_run(self) -> None:
        now = time.perf_counter_ns()  # first: the run's end, not the lock's wait
        with self._lock:
            self._end(self._main, now)

    @contextlib.contextmanager
    def run(self, *, warmup: bool, intended_ns: int | None = None) -> Iterator[None]:
        """One run of the body in this thread or task, which may overlap others (the plugin's
        concurrent and open-loop samples): its calls and values are its sample's, and its span
        starts now and, under an open-loop rate, was meant to start at `intended_ns`."""
        run = _Run()
        now = time.perf_counter_ns()
        with self._lock:
            self._begin(run, warmup, now, intended_ns)
            self._open.append(run)
        token = _CURRENT.set((self, run))
        try:
            yield
        finally:
            _CURRENT.reset(token)
            now = time.perf_counter_ns()
            with self._lock:
                self._end(run, now)
                self._open.remove(run)

    @staticmethod
    def _begin(run: _Run, warmup: bool, started_ns: int, intended_ns: int | None) -> None:
        run.open, run.open_warmup, run.marked = True, warmup, False
        run.sample, run.warmup = _UNNUMBERED, warmup
        run.started_ns, run.intended_ns = started_ns, intended_ns

    def _end(self, run: _Run, now: int) -> None:
        if run.sample == _UNNUMBERED and not run.marked:
            # Nothing happened: still a sample, and a turn (a body that needed no call).
            run.sample = self._next_index(warmup=run.open_warmup)
        self._close(run, now)
        run.open = False
        run.sample, run.warmup, run.intended_ns = OUTSIDE, False, None

    def begin_sample(self, *, warmup: bool) -> None:
        """The body marks a sample of its own; inside a warmup run it is a warmup sample too."""
        now = time.perf_counter_ns()
        with self._lock:
            run = self._here()
            # The run's sample, if something made it one, gets nothing more from here on: it
            # ends now (and so does a sample the body marked inside another).
            self._close(run, now)
            if run.open:
                run.marked = True
                warmup = warmup or run.open_warmup
            run.warmup = warmup
            run.sample = self._next_index(warmup=warmup)
            # The body's own sample starts when it says so: no schedule was meant for it.
            run.started_ns, run.intended_ns = now, None

    def end_sample(self) -> None:
        now = time.perf_counter_ns()
        with self._lock:
            run = self._here()
            self._close(run, now)
            # Between and after the body's own samples, its calls are outside any sample.
            run.sample = OUTSIDE
            run.warmup = run.open_warmup if run.open else False

    def _close(self, run: _Run, now: int) -> None:
        """The open sample's span ends at `now` (none is open outside samples, nor while the
        run has no number yet)."""
        if run.sample not in (OUTSIDE, _UNNUMBERED):
            self.spans.append(
                SampleSpan(run.sample, run.warmup, run.started_ns, now, run.intended_ns)
            )

    def record_value(self, metric: str, value: float) -> None:
        spec = METRICS.get(metric)
        if spec is None:
            raise ValueError(f"unknown metric {metric!r}; valid: {', '.join(METRICS)}")
        if spec.scope is Scope.AGGREGATE:
            raise ValueError(f"{metric!r} is computed over calls and cannot be recorded by hand")
        if spec.dimension is Dimension.MONEY:
            raise ValueError(
                f"{metric!r} is priced from each call's usage and cannot be recorded by hand; "
                'give a model its price in budgets.toml under [prices."<model>"]'
            )
        number = _finite(metric, value)
        run = self._here()
        sample = run.sample
        if sample == _UNNUMBERED:
            sample = self._number_run(run)
        elif sample == OUTSIDE:
            sample = max(self.samples_run - 1, 0)
        self.manual.append(ManualValue(sample, run.warmup, metric, number))

    def calls(self) -> tuple[Call, ...]:
        """Every call so far, grouped; kept (not regrouped, not reparsed) until a new attempt
        arrives, once all attempts have finished."""
        count = len(self.entries)
        if count == self._grouped_upto:
            return self._grouped
        calls, finished = _group(self.entries[:count])  # a copy: threads may still append
        if finished:
            self._grouped, self._grouped_upto = calls, count
        return calls

    def priced(self, calls: tuple[Call, ...]) -> tuple[Call, ...]:
        """`calls` with their cost stamped (`pricing`). Done here, for the plugin's looks and
        reports between and after samples, never in `calls()`, which the test body reads
        (`latency.calls`): the price table's first use imports genai-prices (~0.7 s), which
        must not land inside a sample's wall time."""
        if self.prices is None:
            return calls
        prices = self.prices()
        return tuple(
            Call(c.sample, c.warmup, tuple(prices.stamp(a) for a in c.attempts)) for c in calls
        )

    def measured(self, *, priced: bool = True) -> Measured:
        """Everything this recording holds, priced unless `priced` is false (a look between
        samples with no cost budget: pricing new calls, ~1.5 ms each, would block the loop while
        the last sample's calls are still closing)."""
        calls = self.calls()
        return Measured(
            self.nodeid,
            self.samples_run,
            self.warmups_run,
            self.priced(calls) if priced else calls,
            tuple(self.manual),
            tuple(self.spans),
        )

    @property
    def unreported(self) -> bool:
        return len(self.entries) > self.reported or len(self.manual) > self.reported_manual

    def report(self) -> Measured:
        """What no report has carried yet (everything, the first time); from now on it counts
        as reported."""
        entries = self.entries[self.reported :]  # copies: threads may still append
        manual = self.manual[self.reported_manual :]
        spans = self.spans[self.reported_spans :]  # the samples that have ended
        # An attempt still reading now outlives the test's body (a thread or task nobody
        # joined): it is measured up to this moment and recorded as cut off (issue #14). An
        # abandoned stream (a `break` with the stream left open) is not reading: incomplete.
        now = time.perf_counter_ns()
        for entry in entries:
            record = entry.record
            if record.t_cut_ns is None and record.reading:
                record.t_cut_ns = now
        self.reported += len(entries)
        self.reported_manual += len(manual)
        self.reported_spans += len(spans)
        if self.reported == len(entries) and self._grouped_upto == len(entries):
            calls = self._grouped  # exactly these entries, grouped and final already
        else:
            calls, _ = _group(entries)
        return Measured(
            self.nodeid,
            self.samples_run,
            self.warmups_run,
            self.priced(calls),
            tuple(manual),
            tuple(spans),
        )


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
        return [c for c in self._recording.calls() if c.kept]

    @property
    def all_calls(self) -> list[Call]:
        """Every call, warmup and fixture-phase ones included."""
        return list(self._recording.calls())

    def record(self, metric: str, value: float, unit: str = "s") -> None:
        """Record a value measured by hand; times take a unit (`s`, `ms`, `us`)."""
        scale = _TIME_UNITS.get(unit)
        if scale is None:
            raise ValueError(f"unknown unit {unit!r}; valid: {', '.join(_TIME_UNITS)}")
        if METRICS.get(metric) and METRICS[metric].dimension is Dimension.TIME:
            value = _finite(metric, value) * scale  # 1e306 s is finite; in µs it is not
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


def _finite(metric: str, value: object) -> float:
    """`value` as a finite float, or a ValueError naming the call: NaN, infinities and numbers
    too large for a float would poison every statistic of the test (and once ended the run)."""
    try:
        # A number, not text that parses as one: "12" is a bug in the caller's test.
        number = math.nan if isinstance(value, str | bytes) else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not math.isfinite(number):
        raise ValueError(f"latency.record({metric!r}, {_short_repr(value)}): not a finite number")
    return number


def _short_repr(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 200:
        return f"<int of {value.bit_length()} bits>"  # repr() of a huge int is slow or refused
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


_TIME_UNITS = {"s": 1e6, "ms": 1e3, "us": 1.0, "µs": 1.0, "ns": 1e-3}
