"""Load: running a test's samples concurrently and on an open-loop schedule.

Owns the runs of the body under a load shape (`load.Load`) other than the plain sequential
loop: up to `concurrency` samples in flight at once, each in a thread of its own for a sync test
(a copy of the test's context, as the body would have run in) or in a task of its own on the
test's event loop for an async one, and, under a rate, each started at its intended time
whether or not earlier ones finished (`load.Schedule`), waiting for a free slot when a cap is
full. Each run is a `Recording.run`, so its calls are its sample's whatever else is in flight.

An async test's samples must share its event loop, which pytest-asyncio (and anyio) own: for
the call phase the test's function is swapped (`async_batch`) for one coroutine function that
runs a whole batch of samples as tasks, so each run of the body through pytest's hooks is one
batch. A sample that fails stops the batch from starting more; the samples in flight finish and
the first failure is raised, as the sequential loop would raise it. May import `load` and
`recording` (for types); never pytest (the sampler hands it the body to run).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_latency.load import Load, Schedule
    from pytest_latency.recording import Recording

Body = Callable[[], object]
AsyncBody = Callable[..., Coroutine[Any, Any, object]]


class Batch:
    """One batch of samples to run: how many, how many of the first are warmup, and their
    intended starts (ns offsets from the batch's start; None for a closed loop), with at most
    `slots` in flight (None: no cap)."""

    __slots__ = ("count", "offsets_ns", "recording", "slots", "warmups")

    def __init__(
        self,
        recording: Recording,
        count: int,
        *,
        warmups: int,
        slots: int | None,
        offsets_ns: list[int] | None,
    ) -> None:
        self.recording = recording
        self.count = count
        self.warmups = warmups
        self.slots = slots
        self.offsets_ns = offsets_ns


def batch_of(
    recording: Recording, load: Load, schedule: Schedule | None, count: int, *, warmups: int
) -> Batch:
    """The next batch of `count` samples under `load`, the first `warmups` of them warmup.
    Warmup samples run closed loop at the load's cap (one at a time when it has none): they
    warm the client and its connections, not the schedule (docs/load.md, "Warmup"); under a
    schedule they are a batch of their own."""
    if warmups or schedule is None:
        return Batch(recording, count, warmups=warmups, slots=load.slots or 1, offsets_ns=None)
    offsets = [round(s * 1e9) for s in schedule.next_offsets(count)]
    return Batch(recording, count, warmups=0, slots=load.slots, offsets_ns=offsets)


class _Failure:
    """The first failure of a batch's samples (raised once the batch is done)."""

    __slots__ = ("error", "lock")

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def keep(self, error: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = error

    def raise_first(self) -> None:
        error = self.error
        if error is not None:
            self.error = None  # no reference cycle through the traceback
            raise error


def run_threads(batch: Batch, body: Body) -> None:
    """Run a sync test's batch: each sample in a thread of its own, at most `batch.slots` at
    once, started at its intended time under a schedule."""
    failure = _Failure()
    slots = threading.BoundedSemaphore(batch.slots) if batch.slots is not None else None
    recording, warmups = batch.recording, batch.warmups

    def one(intended: int | None, warmup: bool) -> None:
        try:
            with recording.run(warmup=warmup, intended_ns=intended):
                body()
        except BaseException as exc:  # pytest's outcomes (skip, fail) are BaseExceptions too
            failure.keep(exc)
        finally:
            if slots is not None:
                slots.release()

    threads: list[threading.Thread] = []
    started = time.perf_counter_ns()
    # An interruption (Ctrl-C, a stop signal) raises out of this loop and leaves the samples in
    # flight to their daemon threads: the run reports what it has without waiting for a hung one.
    for index in range(batch.count):
        intended = _intended(batch, index, started)
        if intended is not None:
            _sleep_until(intended)
        if slots is not None:
            slots.acquire()  # a full cap: the wait is the sample's queue
        if failure.error is not None:
            if slots is not None:
                slots.release()
            break
        # The body runs in a copy of the test's context, as it would have in the test's
        # thread (context variables a fixture set are visible in it).
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=context.run,
            args=(one, intended, index < warmups),
            name=f"latency-sample-{index}",
        )
        thread.daemon = True
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    failure.raise_first()


def async_batch(body: AsyncBody, pending: Callable[[], Batch]) -> AsyncBody:
    """The coroutine function an async test's call phase runs instead of `body`: one batch
    (`pending()`, the batch the sampler is running now) of samples, each a task on the
    running loop awaiting `body` with the test's arguments."""

    async def run_batch(**kwargs: object) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "pytest-latency: concurrent and open-loop samples of an async test run as "
                "asyncio tasks; this test runs on another event loop (trio?): run it on asyncio, "
                "or without concurrency= and rate="
            ) from None
        batch = pending()
        failure = _Failure()
        slots = asyncio.Semaphore(batch.slots) if batch.slots is not None else None
        recording, warmups = batch.recording, batch.warmups

        async def one(intended: int | None, warmup: bool) -> None:
            try:
                with recording.run(warmup=warmup, intended_ns=intended):
                    await body(**kwargs)
            except BaseException as exc:
                failure.keep(exc)
                if isinstance(exc, KeyboardInterrupt | SystemExit):
                    raise
            finally:
                if slots is not None:
                    slots.release()

        tasks: list[asyncio.Task[None]] = []
        started = time.perf_counter_ns()
        try:
            for index in range(batch.count):
                intended = _intended(batch, index, started)
                if intended is not None:
                    delay = (intended - time.perf_counter_ns()) / 1e9
                    if delay > 0:
                        await asyncio.sleep(delay)
                if slots is not None:
                    await slots.acquire()
                if failure.error is not None:
                    if slots is not None:
                        slots.release()
                    break
                # Each task runs in a copy of this context: its run stays its own.
                tasks.append(asyncio.ensure_future(one(intended, index < warmups)))
        except BaseException:
            # Interrupted (cancelled, Ctrl-C): the samples in flight are cancelled, not awaited.
            for task in tasks:
                task.cancel()
            raise
        await asyncio.gather(*tasks, return_exceptions=True)
        failure.raise_first()

    run_batch.__name__ = getattr(body, "__name__", "run_batch")
    run_batch.__qualname__ = getattr(body, "__qualname__", "run_batch")
    return run_batch


def _intended(batch: Batch, index: int, started: int) -> int | None:
    offsets = batch.offsets_ns
    return None if offsets is None else started + offsets[index]


def _sleep_until(when_ns: int) -> None:
    delay = (when_ns - time.perf_counter_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)
