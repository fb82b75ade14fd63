"""Routing: which recording a captured call belongs to right now.

Owns `Router`, the one sink capture's records reach (through `attribution`). Tests run one at a
time per process, under pytest-xdist too, so "the test running now" is a single value: the hooks
set it when a test starts and clear it when it ends, and every call started in between, from any
thread, task or executor, belongs to that test. Calls outside any test (collection, session
start) go to the session's own recording.

A test's `Recording` is created on its first call, not when it starts: most tests of a suite
never call an LLM, and pytest loads the plugin for all of them (`recording` itself loads with
the first call). May import `recording`, `pricing`, `budgets` (for types) and `wire`; never
pytest.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pytest_latency.budgets import PriceOverride
    from pytest_latency.pricing import Prices
    from pytest_latency.recording import Recording
    from pytest_latency.wire import WireRecord


class Router:
    __slots__ = (
        "_lock",
        "_prices",
        "_session",
        "body_running",
        "body_started_ns",
        "nodeid",
        "price_overrides",
        "recording",
        "text_limit",
    )

    def __init__(self) -> None:
        self._session: Recording | None = None  # calls outside any test, once there is one
        self.nodeid: str | None = None  # the test running now
        self.recording: Recording | None = None  # its recording, once it has one
        # An unplanned test's body is running: its calls are sample 0, not fixture calls.
        self.body_running = False
        self.body_started_ns = 0  # when it started: its sample's start, whenever it is made
        self.text_limit = 0  # `--latency-capture-text`: characters of text kept per call
        # budgets.toml's [prices]; the `Prices` of every recording's calls, made with the first.
        self.price_overrides: Sequence[PriceOverride] = ()
        self._prices: Prices | None = None
        self._lock = threading.Lock()

    def route(self, record: WireRecord) -> None:
        """The sink: hand `record` to the running test, or to the session outside tests."""
        if self.text_limit:
            record.text_limit = self.text_limit
        (self.current() or self._outside_tests()).sink(record)

    # start, finish and the creation in current() hold the lock: a thread's first call racing
    # the end of its test must not install a recording named after one test into the next.
    def start(self, nodeid: str) -> None:
        with self._lock:
            self.nodeid, self.recording, self.body_running = nodeid, None, False

    def finish(self) -> None:
        with self._lock:
            self.nodeid, self.recording, self.body_running = None, None, False

    def current(self) -> Recording | None:
        """The running test's recording, created on first use; None between tests."""
        recording = self.recording
        if recording is not None or self.nodeid is None:
            return recording
        # Two threads of one test may make their first calls at once: one recording, not two.
        with self._lock:
            if self.recording is None and self.nodeid is not None:
                from pytest_latency.recording import Recording

                created = Recording(self.nodeid, prices=self.prices)
                if self.body_running:
                    created.begin_run(warmup=False, started_ns=self.body_started_ns)
                self.recording = created
            return self.recording

    def prices(self) -> Prices:
        """What prices the calls: made when a recording first prices its calls, at a look or
        a report, never inside a call (`pricing` loads then, genai-prices with the first call
        priced)."""
        if self._prices is None:
            from pytest_latency.pricing import Prices

            self._prices = Prices(self.price_overrides)
        return self._prices

    def snapshots_used(self) -> dict[str, str | None]:
        """The genai-prices snapshots this process priced calls with (`Prices.snapshots_used`)."""
        return {} if self._prices is None else self._prices.snapshots_used()

    def _outside_tests(self) -> Recording:
        with self._lock:
            if self._session is None:
                from pytest_latency.recording import Recording

                self._session = Recording("<session>", prices=self.prices)
            return self._session

    def begin_plain_run(self) -> None:
        """An unplanned test's body starts: sample 0 (of a recording made now or later)."""
        started = time.perf_counter_ns()
        with self._lock:
            self.body_running = True
            self.body_started_ns = started
            if self.recording is not None:
                self.recording.begin_run(warmup=False, started_ns=started)

    def end_plain_run(self) -> None:
        """The body has returned (or raised): its sample ends."""
        with self._lock:
            self.body_running = False
            if self.recording is not None:
                self.recording.end_run()
