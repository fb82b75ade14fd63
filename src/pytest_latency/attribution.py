"""Attribution: the one place a freshly started `WireRecord` is handed to.

Owns the process-wide sink that capture calls for every record it starts. It has to be process
state: a call may start in a plain thread that carries no context and no reference to pytest's
config. Tests run one at a time per process (under pytest-xdist too), so one sink that knows the
running test attributes every call exactly, whichever thread, task or executor made it. The plugin
installs its router in `pytest_configure` and puts back the previous sink in
`pytest_unconfigure`; outside a pytest session records go nowhere. Stdlib only; may import `wire`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_latency.wire import WireRecord

Sink = Callable[["WireRecord"], None]


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
