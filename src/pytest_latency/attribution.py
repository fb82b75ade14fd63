"""Attribution: the one place a freshly started `WireRecord` is handed to.

Owns the process-wide sink that capture calls for every record it starts. It has to be process
state: a call may start in a plain thread that carries no context and no reference to pytest's
config. Tests run one at a time per process (under pytest-xdist too), so one sink that knows the
running test attributes every call exactly, whichever thread, task or executor made it. The plugin
installs its router in `pytest_configure` and puts back the previous sink in
`pytest_unconfigure`; outside a pytest session records go nowhere.

Also owns `CAPTURING`, the mark of an attempt being recorded now (a context variable, so it
follows the attempt into its thread or task): a binding underneath the one recording it stands
aside, and `audit` does not count the connection it makes. Stdlib only; may import `wire`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_latency.wire import WireRecord

Sink = Callable[["WireRecord"], None]

# True inside an attempt a binding records: a binding underneath it stands aside (an httpx
# transport built on aiohttp, as openai's DefaultAioHttpClient and litellm's aiohttp transport
# are, is recorded by the httpx wrapper, not by the aiohttp middleware below it), and the audit
# does not count the connection it makes.
CAPTURING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "pytest_latency_capturing", default=False
)


class _Installed:
    # A plain class, not a dataclass: this module loads with the plugin in every pytest session.
    __slots__ = ("sink",)

    def __init__(self) -> None:
        self.sink: Sink | None = None


_installed = _Installed()


def route(record: WireRecord) -> None:
    """Hand `record` to the installed sink (dropped only outside a pytest session)."""
    sink = _installed.sink
    if sink is not None:
        sink(record)


def set_sink(sink: Sink | None) -> Sink | None:
    """Install the sink every record goes to (None: none); return the one it replaces, which a
    nested pytest session (pytester's inline runs) puts back when it ends."""
    previous, _installed.sink = _installed.sink, sink
    return previous
