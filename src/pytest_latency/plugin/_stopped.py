"""The hooks of a run a stop signal ends (`_signals`), on the controller and on each worker.

Owns `HeldReports`, registered once a process has installed its stop-signal handlers: a stop
waits while the plugin makes and logs a report (a record built, attached, added to the result
file, sent by pytest-xdist), and comes once the report is logged. And `WorkerSide`, registered on
each pytest-xdist worker of a run that writes outputs: a stop signal (the controller forwards
its signal to its workers; a terminal's Ctrl-C or hangup reaches the whole process group) ends the
worker's session the way pytest-xdist expects of a worker told to stop: `session.shouldstop`,
then pytest's `Exit` out of whatever runs. Not a KeyboardInterrupt: pytest-xdist takes a worker
that exits with INTERRUPTED for a crashed one, reports its test as failed and starts a
replacement. What the test in flight measured travels to the controller in `workeroutput`
(`IN_FLIGHT_KEY`), where the collector adds it; so do the genai-prices snapshots the worker's
calls were priced with (`PRICES_KEY`), for the result file's price stamp.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

import pytest

from pytest_latency.plugin._sampling import in_flight
from pytest_latency.plugin._signals import WorkerStop
from pytest_latency.plugin._state import HELD_NAME

if TYPE_CHECKING:
    from pytest_latency.plugin._signals import StopSignals
    from pytest_latency.plugin._state import RunState

IN_FLIGHT_KEY = "pytest_latency_in_flight"  # in workeroutput: the test in flight, as plain data
PRICES_KEY = "pytest_latency_prices"  # in workeroutput: {snapshot kind: fetched or None}


class HeldReports:
    def __init__(self, signals: StopSignals) -> None:
        self._signals = signals

    # A report made is logged next: a stop that came while it was made waits for that.
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        with self._signals.held(then=False):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self) -> Generator[None, None, None]:
        with self._signals.held():
            return (yield)


class WorkerSide:
    def __init__(self, run: RunState, workeroutput: dict[str, object]) -> None:
        self._run = run
        self._workeroutput = workeroutput
        self._stop: WorkerStop | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        def stop(name: str) -> None:
            session.shouldstop = f"received {name}"
            # Any status but INTERRUPTED (see the module docstring); the run's own status is
            # the controller's.
            pytest.exit(f"received {name}", returncode=pytest.ExitCode.TESTS_FAILED)

        signals = WorkerStop(stop)
        if signals.install():
            self._stop = signals
            self._run.restore_signals = signals.restore
            session.config.pluginmanager.register(HeldReports(signals), HELD_NAME)

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        # pytest's terminal reporter formats the whole traceback with every frame's arguments
        # (a second or more on a busy machine) on a worker, where nobody reads it, while the
        # controller waits for this worker's test in flight: the frame that raised is enough.
        if self._stop is not None and self._stop.received is not None:
            excinfo.traceback = excinfo.traceback[-1:]

    # Last: pytest's own sessionfinish tears down the fixtures of the test `Exit` cut short, and
    # their calls are the test's; pytest-xdist sends workeroutput after every implementation.
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self) -> None:
        self._workeroutput[PRICES_KEY] = self._run.router.snapshots_used()
        if self._stop is None or self._stop.received is None:
            return
        test = in_flight(self._run.router)
        if test is not None:
            self._workeroutput[IN_FLIGHT_KEY] = test.to_wire()
