"""Attribution: which test a captured call belongs to.

Owns the routing of a freshly started `WireRecord` to whoever is recording right now. The running
test is found through a context variable (visible inside async tests, tasks and `contextvars`
-aware executors) and, for threads that do not inherit the context (`threading.Thread`,
`ThreadPoolExecutor`), through a per-process fallback. Tests run one at a time per process, even
under pytest-xdist, so the fallback is exact for threads started by the test body.

The fallback is the one piece of process-wide state in the package, and it has to be: a plain
thread carries no context and no reference to pytest's config. The plugin points it at an object
it keeps in `config.stash` and clears it in `pytest_unconfigure`.
Stdlib only; may import `wire`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from pytest_latency.wire import WireRecord

Sink = Callable[[WireRecord], None]

_current_sink: ContextVar[Sink | None] = ContextVar("pytest_latency_sink", default=None)


@dataclass(slots=True)
class _Fallback:
    sink: Sink | None = None


_process_fallback = _Fallback()


def route(record: WireRecord) -> None:
    """Hand `record` to the current test's sink; with no test running it is dropped here only if
    the plugin installed no fallback (i.e. outside a pytest session)."""
    sink = _current_sink.get() or _process_fallback.sink
    if sink is not None:
        sink(record)


@contextlib.contextmanager
def routing_to(sink: Sink) -> Iterator[None]:
    """Route records started in this context (and in threads, via the fallback) to `sink`."""
    token = _current_sink.set(sink)
    previous = _process_fallback.sink
    _process_fallback.sink = sink
    try:
        yield
    finally:
        _process_fallback.sink = previous
        _current_sink.reset(token)


def set_fallback(sink: Sink | None) -> None:
    """Where records go when no test is running (session fixtures, collection); None to stop."""
    _process_fallback.sink = sink
