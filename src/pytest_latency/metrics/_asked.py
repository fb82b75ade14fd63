"""What the kernel said at a sync consumer's asks of its content stamps.

Owns `asked_shown`: each content event's time read from a sync call's stamps and the kernel's
arrival times at the consumer's asks after an absence (`WireRecord.asked_arrivals`). A sync read
of data already buffered is stamped when the consumer asked, not when the data came: the
consumer's own work before the ask (litellm parsing its role event), or its wait for a CPU,
lands in the stamp. The kernel's stamp of the newest data queued at the ask bounds every event
whole in the queue: it came by then. The async twin, which the loop's passes bound as well, is
`_call._stamp_bounds`.

Pure; may import only the stdlib and `pytest_latency.wire`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from pytest_latency.wire import WireRecord


def asked_shown(
    record: WireRecord,
    stamps: Sequence[tuple[int, int]],
    ended: Sequence[int],
    agree: Sequence[int],
) -> list[int]:
    """Each content event's time, from its (stamp, read index) in `stamps`: the stamp, or,
    where the kernel said at an ask that the event's end had come by an earlier time, that
    time; and no later than any event after it is shown by (a stream's events come in order).
    Every time is the latest its event can have come by, never before it came.

    An ask's queue is the bytes next to be read from the socket, after any a layer above it
    holds (h11's buffer): the events ended in the reads from the asked one on (`ended`, by the
    count a peek makes) are those bytes' and the queue's, in order, so the first as many as the
    queue held whole came by the kernel's stamp (were some of them a buffer's, they came earlier
    still). A read is timed so only where it ended one of them and the parser agrees with the
    count there (`agree`, `_ends.counted_ends`); the walk stops at the first that does not, and
    at the queue's last whole event. Not a note whose queue did not end at an event's end (a
    chunked queue read from mid-chunk can pass for one that begins at a chunk's size line, but
    hardly for one that also ends whole), nor one the record contradicts (before the request,
    or after the read it was taken at)."""
    shown = [t for t, _ in stamps]
    reads = record.reads
    notes = record.asked_arrivals
    # A capped record's last kept read may be cut short: its events cannot be counted; a coded
    # body's socket bytes are not its events (capture does not peek at one: kept out here too).
    if not notes or record.capped or record.content_encoding or not reads:
        return shown
    before = [0, *itertools.accumulate(ended)]
    came = [arrived for _, arrived, _ in reads]  # each read's events came by this
    for note in notes:
        index = note.read
        if note.events <= 0 or not note.ends or not 0 <= index < len(reads):
            continue
        if not record.t_start_ns <= note.arrived_ns <= reads[index][1]:
            continue
        whole = before[index] + note.events  # the events ended by the queue's last whole one
        for j in range(index, len(reads)):
            if before[j + 1] > whole or not agree[j]:
                break
            if ended[j]:
                came[j] = min(came[j], note.arrived_ns)
            if before[j + 1] == whole:
                break
    shown = [min(t, came[read]) for t, read in stamps]
    for i in range(len(shown) - 2, -1, -1):
        shown[i] = min(shown[i], shown[i + 1])
    return shown
