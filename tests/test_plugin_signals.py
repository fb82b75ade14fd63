"""Stop signals as an interrupt (`plugin._signals`): installed only over default handlers and only
on the main thread, raising a KeyboardInterrupt once and putting the previous handlers back; with
workers, forwarded to them first and raised after the grace; held off while the plugin keeps its
books; on a worker, the stop reaches the main thread even when the kernel hands the signal to
another thread. The end-to-end behaviour, real pytest processes stopped mid-test, is in
test_plugin_outputs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_latency.plugin._signals import Interruption, Terminated, WorkerStop, stop_signals

POSIX = pytest.mark.skipif(os.name != "posix", reason="SIGHUP, SIGQUIT and os.kill are POSIX")


@pytest.fixture
def default_handlers() -> Iterator[None]:
    # This very session may have replaced them (the plugin is active here too).
    signals = stop_signals(sigint=True)
    outer = {
        s: signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)
        for s in signals
    }
    try:
        yield
    finally:
        for s, handler in outer.items():
            signal.signal(s, handler)


def _wait_for_interrupt(seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # the handler runs in the main thread, between bytecodes
        time.sleep(0.01)


def _is_default(signum: signal.Signals) -> bool:
    handler = signal.getsignal(signum)
    return handler is (signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)


def test_the_stop_signals_are_those_the_platform_has() -> None:
    names = {s.name for s in stop_signals()}
    assert "SIGTERM" in names and "SIGINT" not in names
    assert "SIGINT" in {s.name for s in stop_signals(sigint=True)}
    if os.name == "posix":
        assert {"SIGHUP", "SIGQUIT"} <= names


@POSIX
@pytest.mark.usefixtures("default_handlers")
@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP", "SIGQUIT"])
def test_a_stop_signal_raises_a_keyboard_interrupt_once_then_terminates_as_before(
    name: str,
) -> None:
    signum = signal.Signals[name]
    interruption = Interruption()
    assert interruption.install()
    with pytest.raises(KeyboardInterrupt) as info:
        os.kill(os.getpid(), signum)
        _wait_for_interrupt()
    assert isinstance(info.value, Terminated) and str(info.value) == f"received {name}"
    assert interruption.received == name
    assert all(_is_default(s) for s in stop_signals(sigint=True))  # all back, not only this one
    interruption.restore()  # harmless once they are back
    assert all(_is_default(s) for s in stop_signals(sigint=True))


@pytest.mark.usefixtures("default_handlers")
def test_sigint_is_left_to_pytest_unless_asked_for() -> None:
    interruption = Interruption()
    assert interruption.install()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert not _is_default(signal.SIGTERM)
    interruption.restore()
    with_sigint = Interruption(sigint=True)
    assert with_sigint.install()
    assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    with_sigint.restore()
    assert all(_is_default(s) for s in stop_signals(sigint=True))


@pytest.mark.usefixtures("default_handlers")
def test_handlers_someone_else_installed_are_left_alone() -> None:
    def theirs(signum: int, frame: object) -> None:
        pass

    signal.signal(signal.SIGTERM, theirs)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    interruption = Interruption(sigint=True)
    assert interruption.install()  # SIGINT and SIGQUIT were still the defaults
    assert signal.getsignal(signal.SIGTERM) is theirs
    if hasattr(signal, "SIGHUP"):
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    # One set after ours stays when ours are put back.
    signal.signal(signal.SIGINT, theirs)
    interruption.restore()
    assert signal.getsignal(signal.SIGINT) is theirs


@pytest.mark.usefixtures("default_handlers")
def test_nothing_is_installed_off_the_main_thread() -> None:
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(Interruption(sigint=True).install()))
    worker.start()
    worker.join()
    assert results == [False] and all(_is_default(s) for s in stop_signals(sigint=True))


@POSIX
@pytest.mark.usefixtures("default_handlers")
def test_a_signal_waits_for_the_held_section_then_raises_and_none_comes_after_the_end() -> None:
    interruption = Interruption()
    assert interruption.install()
    steps: list[str] = []
    with pytest.raises(Terminated):
        with interruption.held():
            os.kill(os.getpid(), signal.SIGTERM)
            _wait_for_interrupt(0.2)
            steps.append("the held section finished")
    assert steps == ["the held section finished"]

    again = Interruption()
    assert again.install()
    again.end()  # the run loop is over: noted, not raised
    os.kill(os.getpid(), signal.SIGTERM)
    _wait_for_interrupt(0.2)
    assert again.received == "SIGTERM"
    again.restore()


WORKER = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: (print("got", a[0], flush=True), sys.exit(0)))
print("ready", flush=True)
time.sleep(30)
"""


@pytest.fixture
def worker() -> Iterator[subprocess.Popen[str]]:
    """A process standing in for a pytest-xdist worker: it reports the signal it got."""
    with subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        yield p
        p.kill()


@POSIX
@pytest.mark.usefixtures("default_handlers")
def test_with_workers_the_signal_is_forwarded_then_raised_after_the_grace(
    worker: subprocess.Popen[str],
) -> None:
    interruption = Interruption(lambda: [worker.pid], grace_s=0.5)
    assert interruption.install()
    started = time.monotonic()
    with pytest.raises(Terminated) as info:
        os.kill(os.getpid(), signal.SIGTERM)
        _wait_for_interrupt(10)
    waited = time.monotonic() - started
    # Not at once (the workers were told first), and not later than the grace allows.
    assert 0.5 <= waited < 5, waited
    assert str(info.value) == "received SIGTERM"
    assert worker.wait(timeout=10) == 0
    assert worker.stdout is not None and worker.stdout.read() == f"got {int(signal.SIGTERM)}\n"


@POSIX
@pytest.mark.usefixtures("default_handlers")
def test_with_workers_a_second_signal_raises_at_once(worker: subprocess.Popen[str]) -> None:
    interruption = Interruption(lambda: [worker.pid], grace_s=30)
    assert interruption.install()
    os.kill(os.getpid(), signal.SIGTERM)
    _wait_for_interrupt(0.2)  # forwarded: nothing raised yet
    started = time.monotonic()
    with pytest.raises(Terminated):
        os.kill(os.getpid(), signal.SIGHUP)
        _wait_for_interrupt(10)
    assert time.monotonic() - started < 5
    assert all(_is_default(s) for s in stop_signals())
    worker.wait(timeout=10)


class Stopped(Exception):
    pass


@POSIX
@pytest.mark.usefixtures("default_handlers")
def test_a_worker_stops_once_and_ignores_the_rest() -> None:
    calls: list[str] = []

    def stop(name: str) -> None:
        calls.append(name)
        raise Stopped(name)

    worker = WorkerStop(stop)
    assert worker.install()
    with pytest.raises(Stopped):
        os.kill(os.getpid(), signal.SIGINT)
        _wait_for_interrupt()
    os.kill(os.getpid(), signal.SIGTERM)  # ignored, until restore
    _wait_for_interrupt(0.2)
    assert calls == ["SIGINT"] and worker.received == "SIGINT"
    worker.restore()
    assert all(_is_default(s) for s in stop_signals(sigint=True))
    assert signal.set_wakeup_fd(-1) == -1  # its wakeup descriptor is gone too


# A worker's threads: execnet's reader blocked on a pipe, the simulator's event loop. The kernel
# may hand two signals sent at once (a process group's and the controller's copy) to those.
SLEEPER = """
import asyncio, os, signal, sys, threading, time
sys.path.insert(0, {src!r})
from pytest_latency.plugin._signals import WorkerStop

def stop(name):
    print("stopped", name, flush=True)
    os._exit(0)

def loop():
    asyncio.new_event_loop().run_forever()

assert WorkerStop(stop).install()
threading.Thread(target=lambda: sys.stdin.buffer.read(1), daemon=True).start()
threading.Thread(target=loop, daemon=True).start()
print("ready", flush=True)
time.sleep(15)
print("slept through", flush=True)
"""


@POSIX
def test_a_worker_stops_when_other_threads_took_the_signals() -> None:
    src = str(Path(__file__).resolve().parents[1] / "src")
    slow: list[float] = []
    for _ in range(8):
        with subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(SLEEPER).format(src=src)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as sleeper:
            assert sleeper.stdout is not None and sleeper.stdout.readline() == "ready\n"
            started = time.monotonic()
            os.kill(sleeper.pid, signal.SIGINT)
            os.kill(sleeper.pid, signal.SIGTERM)
            line = sleeper.stdout.readline()
            assert line.startswith("stopped SIG"), line
            slow.append(time.monotonic() - started)
            sleeper.kill()
    # Without the watcher a third to three quarters of these sleep on to the end (measured).
    assert max(slow) < 10, slow
