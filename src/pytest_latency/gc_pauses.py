"""The process's garbage-collection pauses: how long CPython's cyclic collector has held the
process, summed, and the freeze that keeps it short.

A collection holds the GIL: every thread stops, a consumer between two reads and an event loop
between two wake-ups alike, so data that arrived meanwhile is stamped late. A full collection
scans every tracked object; the ~230k that the SDKs, pytest and the plugin hold after start-up
took ~110 ms a collection here (CPython 3.11), and one that fell inside a call held its stamps
back that long: a prompt `for _ in stream: pass` loop came out `consumer_bound`, an async one
`client_saturated`, and a first call paid 8 ms of young-generation collection that the next did
not (issue #14; session 7 note). Capture reads `PAUSED` around a consumer's absences, as it
reads the run-queue counter, so that `metrics` names the collector, not the test body, as what
held a call back (`gc_paused`).

`freeze()` moves every object alive at that moment to the collector's permanent generation
(`gc.freeze`, O(1)): later collections scan only what is made after it. The plugin calls it when
a session's first test body starts, and again after a setup that warmed an SDK: the modules,
fixtures and warmed SDK models that exist then live as long as the run.

Owns `PAUSED`, its `gc.callbacks` hook (installed on import; ~1 µs a collection), `freeze` and
`thaw` (the plugin thaws at its session's end what it froze).
Imports only the standard library.
"""

from __future__ import annotations

import gc
import time
from typing import Final

# [collections' summed duration (ns), the running one's start (ns)]: a list, not two module
# globals, so that capture's hot loop reads it through one local name. Only the thread that
# holds the GIL collects, so the two updates never interleave.
PAUSED: Final[list[int]] = [0, 0]


def _on_collection(phase: str, info: dict[str, int]) -> None:
    now = time.perf_counter_ns()
    if phase == "start":
        PAUSED[1] = now
    elif PAUSED[1]:
        PAUSED[0] += now - PAUSED[1]
        PAUSED[1] = 0


def paused_ns() -> int:
    """The time the collector has held this process since the hook was installed (ns)."""
    return PAUSED[0]


def install() -> None:
    """Start summing collections (idempotent; done on import)."""
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def freeze() -> int:
    """Exempt every object alive now from later collections; how many are exempt in all."""
    gc.freeze()
    return gc.get_freeze_count()


def frozen() -> int:
    """How many objects are exempt from collection now (`gc.freeze`'s, anyone's)."""
    return gc.get_freeze_count()


def thaw() -> None:
    """Make every frozen object collectable again (the plugin does at its session's end, when
    nothing was frozen at its start)."""
    gc.unfreeze()


install()

__all__ = ["PAUSED", "freeze", "frozen", "install", "paused_ns", "thaw"]
