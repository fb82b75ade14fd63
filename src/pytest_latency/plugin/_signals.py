"""Stop signals as an interrupt: what CI runners, terminals and supervisors send to end a run.

Owns which signals stop a session that writes outputs (SIGTERM, SIGHUP and SIGQUIT where the
platform has them; SIGINT too under pytest-xdist, where pytest's own Ctrl-C handling would not
wait for the workers' tests in flight) and what each process does with them, so the session
finishes and its outputs are written with what was measured, marked partial:

- `Interruption`, on the controller (or a run without workers): the signal raises `Terminated`
  (a KeyboardInterrupt, as Ctrl-C raises one), so pytest unwinds the same way. With workers it
  first forwards the signal to them and waits, up to `GRACE_S`, for them to stop and report their
  tests in flight; a second signal, or the end of the wait, raises at once. None raises once
  the run loop is over (the outputs are being built).
- `WorkerStop`, on a pytest-xdist worker: the first signal calls its `stop` (the plugin ends the
  worker's session the way pytest-xdist expects of a worker told to stop); later ones are
  ignored, so the worker's report of its test in flight is not cut short.

Both wait while `held()`: an exception raised in the middle of the plugin's own bookkeeping (a
record half added, a report half sent, a module half imported) would lose more than the signal
asked for, so it is raised when the held section ends (`then=True`) or the next one that says so
does. Each replaces only a default handler (one the user or another plugin installed, or an
ignored signal, is left alone), only on the main thread (the only one that may set handlers, and
the one that gets the exception), and `restore` puts the previous ones back; after a raise the
previous handlers are back at once (another signal terminates as it always did). SIGKILL cannot
be caught. Imports nothing of the package, and not pytest.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

# How long the controller waits for its workers to stop and report once they were signalled. A
# worker unwinds its test in a fraction of a second (a second or two on an overloaded machine);
# supervisors send SIGKILL some seconds after their first signal (GitHub Actions 10 s after its
# SIGINT, Docker 10 s after SIGTERM), and the outputs must be written before.
GRACE_S = 3.0

_STOP_NAMES = ("SIGTERM", "SIGHUP", "SIGQUIT")


def stop_signals(*, sigint: bool = False) -> tuple[signal.Signals, ...]:
    """The stop signals this platform has (SIGHUP and SIGQUIT are POSIX-only), with SIGINT."""
    names = ("SIGINT", *_STOP_NAMES) if sigint else _STOP_NAMES
    return tuple(getattr(signal, n) for n in names if hasattr(signal, n))


class Terminated(KeyboardInterrupt):
    """A stop signal, raised in the main thread; pytest reports it as an interrupted run."""


def _is_default(signum: signal.Signals, handler: Any) -> bool:
    if signum == signal.SIGINT:
        return handler is signal.default_int_handler  # Python's own: KeyboardInterrupt
    return handler is signal.SIG_DFL


class StopSignals:
    """Our handler over the default one of each of `signals`; a stop held off while held."""

    def __init__(self, signals: Sequence[signal.Signals]) -> None:
        self._signals = signals
        self._previous: dict[signal.Signals, Any] = {}
        self._held = 0
        self._pending: Callable[[], None] | None = None  # what the signal asked, held off
        self.received: str | None = None  # the first stop signal's name, once one came

    def install(self) -> bool:
        """Install the handlers; False if none was (not the main thread, or every stop signal
        already handled)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for signum in self._signals:
            previous = signal.getsignal(signum)
            if _is_default(signum, previous):
                signal.signal(signum, self._handle)
                self._previous[signum] = previous
        return bool(self._previous)

    def restore(self) -> None:
        # From the main thread only, and only over our own handler: one someone set after ours
        # stays.
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) == self._handle:
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(signum, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        raise NotImplementedError

    def _now_or_held(self, action: Callable[[], None]) -> None:
        if self._held:
            self._pending = action
        else:
            action()

    @contextlib.contextmanager
    def held(self, *, then: bool = True) -> Iterator[None]:
        """A section a stop must not cut; it stops at the end of the outermost one, or, with
        `then=False` (a report made, to be logged next), at the end of the next one."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
        if then and not self._held and self._pending is not None:
            action, self._pending = self._pending, None
            action()


class Interruption(StopSignals):
    """The controller's stop signals: `workers` gives the process ids to forward a signal to
    (none: raise at once)."""

    def __init__(
        self,
        workers: Callable[[], Sequence[int]] = tuple,
        *,
        sigint: bool = False,
        grace_s: float = GRACE_S,
    ) -> None:
        super().__init__(stop_signals(sigint=sigint))
        self._workers = workers
        self._grace_s = grace_s
        self._forwarded: signal.Signals | None = None  # the signal the workers were told of
        self._timer: threading.Timer | None = None
        self._ended = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        self.received = self.received or name
        if self._ended:
            return  # the run loop is over: the outputs are being built, then the handlers go
        if self._forwarded is None and self._forward(signal.Signals(signum)):
            self._forwarded = signal.Signals(signum)
            self._timer = threading.Timer(self._grace_s, self._expire)
            self._timer.daemon = True
            self._timer.start()
            return
        self._now_or_held(lambda: self._raise(self.received or name))

    def _forward(self, signum: signal.Signals) -> bool:
        """The signal to each worker; whether any was signalled. The same one: a worker may
        have had it already (a terminal's Ctrl-C, a supervisor's signal to the process group),
        and a second of the same kind merges with it, where a different one arriving at once
        may go to another of its threads and leave the main one asleep in the test."""
        if os.name != "posix":  # elsewhere os.kill terminates the process outright
            return False
        signalled = False
        for pid in self._workers():
            with contextlib.suppress(OSError):  # gone already
                os.kill(pid, signum)
                signalled = True
        return signalled

    def _expire(self) -> None:
        # The timer's thread: deliver the signal again to the main thread itself (a
        # process-directed one may wake another thread and leave the main one in its wait).
        forwarded = self._forwarded
        if forwarded is not None and not self._ended:
            with contextlib.suppress(OSError, ValueError):
                signal.pthread_kill(threading.main_thread().ident or 0, forwarded)

    def _raise(self, name: str) -> None:
        if self._ended:
            return
        self._cancel_timer()
        self.restore()
        raise Terminated(f"received {name}")

    def end(self) -> None:
        """The run loop is over: from now on a stop signal is noted, not raised."""
        self._ended = True
        self._pending = None
        self._cancel_timer()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def restore(self) -> None:
        self._cancel_timer()
        super().restore()


class WorkerStop(StopSignals):
    """A pytest-xdist worker's stop signals: the first calls `stop` with its name (it raises);
    later ones are ignored until `restore`.

    A worker often gets two at once (a process group's signal and the controller's copy), and
    the kernel may then hand both to other threads (execnet's reader, the simulator's loop)
    while the main one sleeps on in the test: Python runs the handler only when the main thread
    next runs bytecode. So a watcher thread reads the signal module's wakeup descriptor and,
    until the handler has run, sends each stop signal on to the main thread itself."""

    def __init__(self, stop: Callable[[str], None]) -> None:
        super().__init__(stop_signals(sigint=True))
        self._stop = stop
        self._wakeup: int | None = None  # the wakeup pipe's write end, while ours

    def install(self) -> bool:
        if not super().install():
            return False
        self._watch()
        return True

    def _watch(self) -> None:
        if not hasattr(signal, "pthread_kill"):
            return
        read, write = os.pipe()
        os.set_blocking(write, False)  # the signal handler's write must never block
        try:
            previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except (ValueError, OSError):
            previous = None
        if previous != -1:  # someone else's (an event loop's): theirs stays
            if previous is not None:
                signal.set_wakeup_fd(previous)
            os.close(read)
            os.close(write)
            return
        self._wakeup = write
        watcher = threading.Thread(
            target=self._wake_main, args=(read,), name="pytest-latency-stop", daemon=True
        )
        watcher.start()

    def _wake_main(self, read: int) -> None:
        main = threading.main_thread().ident or 0
        mine = {int(s) for s in self._previous}
        while True:
            try:
                data = os.read(read, 64)
            except OSError:
                data = b""
            if not data:  # closed by restore
                with contextlib.suppress(OSError):
                    os.close(read)
                return
            for signum in data:
                if signum in mine and self.received is None:
                    with contextlib.suppress(OSError, ValueError):
                        signal.pthread_kill(main, signum)
                    # Each signal sent writes its number here again: at most one every 50 ms
                    # while the main thread has not run the handler yet.
                    time.sleep(0.05)
                    break

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            return
        name = self.received = signal.Signals(signum).name
        self._now_or_held(lambda: self._stop(name))

    def restore(self) -> None:
        if self._wakeup is not None and threading.current_thread() is threading.main_thread():
            write, self._wakeup = self._wakeup, None
            with contextlib.suppress(ValueError, OSError):
                current = signal.set_wakeup_fd(-1)
                if current != write:  # someone set theirs since: it stays
                    signal.set_wakeup_fd(current)
            os.close(write)  # the watcher reads EOF, closes its end and ends
        super().restore()


__all__ = ["GRACE_S", "Interruption", "StopSignals", "Terminated", "WorkerStop", "stop_signals"]
