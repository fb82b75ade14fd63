"""SIGTERM as an interrupt: what CI runners send a job on cancel and on timeout.

Owns `interrupt_on_sigterm`: for the session, on the main thread of the controller, SIGTERM
raises `Terminated` (a KeyboardInterrupt) as Ctrl-C raises KeyboardInterrupt, so pytest unwinds
the same way, the session finishes and the outputs are written with what was measured, marked
partial. It replaces only the default handler (one the user or another plugin installed, or an
ignored SIGTERM, is left alone), and the previous handler is back once the first SIGTERM arrives
(a second one terminates as it always did) and when the session finishes. Imports nothing of the
package, and not pytest.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread; pytest reports it as an interrupted run."""


def interrupt_on_sigterm() -> Callable[[], None] | None:
    """Install the handler; return what puts the previous one back, or None if none was
    installed (not the main thread, or SIGTERM already handled)."""
    if threading.current_thread() is not threading.main_thread():
        return None  # only the main thread may set handlers, and only it gets the exception
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        return None

    def restore() -> None:
        # From the main thread only, and only over our own handler: a handler someone set
        # after ours stays.
        if signal.getsignal(signal.SIGTERM) is handler:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, previous)

    def handler(signum: int, frame: FrameType | None) -> None:
        restore()
        raise Terminated(f"received {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, handler)
    return restore
