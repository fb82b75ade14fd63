"""The kernel's byte counts of captured sockets (`capture._received`), on real loopback sockets and
Linux's epoll; where a peek's queue places each event (`capture._queued.event_end_offsets`); and
what the placed events do to a call's stamp bounds (`metrics`)."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator

import pytest

from pytest_latency.capture._queued import Framing, event_end_offsets, whole_events
from pytest_latency.capture._received import KEPT_COUNTS, Received, received

pytestmark = pytest.mark.skipif(
    Received.open() is None, reason="an edge-triggered epoll and TCP_INFO's byte count: Linux's"
)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    # Each send its own segment, at once (Nagle's wait for an ACK held 1-byte sends 40 ms).
    peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    yield client, peer
    for s in (client, peer, server):
        s.close()


@pytest.fixture
def counts() -> Iterator[Received]:
    opened = Received.open()
    assert opened is not None
    yield opened
    opened.close()


def _arrive(client: socket.socket, peer: socket.socket, data: bytes) -> tuple[int, int]:
    """Send `data` and wait until the client's count shows it (loopback delivers within the
    send, but leave room for a busy machine): the clock before the send, and the new count."""
    before = time.perf_counter_ns()
    start = received(client)
    assert start is not None
    peer.sendall(data)
    for _ in range(1000):
        now = received(client)
        if now is not None and now >= start + len(data):
            return before, now
        time.sleep(0.001)
    raise AssertionError("the bytes never came")


def test_the_count_is_the_kernels_bytes_received(pair: tuple[socket.socket, socket.socket]) -> None:
    client, peer = pair
    assert received(client) == 0
    _arrive(client, peer, b"x" * 100)
    _arrive(client, peer, b"y" * 50)
    assert received(client) == 150
    client.recv(1000)  # read or not, the count is of what came
    assert received(client) == 150


def test_no_count_once_the_peer_has_closed(pair: tuple[socket.socket, socket.socket]) -> None:
    """The count takes in the peer's FIN as a byte no read returns: each event placed from it
    would be a byte on, with the window of the bytes after it (review, session 21)."""
    client, peer = pair
    _arrive(client, peer, b"data: 1\n\n")
    assert received(client) == 9
    peer.shutdown(socket.SHUT_WR)
    for _ in range(1000):
        if received(client) is None:
            break
        time.sleep(0.001)
    assert received(client) is None
    assert client.recv(100) == b"data: 1\n\n"  # the data is all there to read


def test_a_look_that_found_nothing_holding_data_speaks_as_of_the_look(
    pair: tuple[socket.socket, socket.socket], counts: Received
) -> None:
    """A probe that found no socket holding data spares the asking its epoll_wait; but data may
    have come between its look and now (the loop's thread waiting for the GIL after it): what
    comes next came after the look, not after now (review, session 21)."""
    client, peer = pair
    fd = client.fileno()
    counts.watch(client)
    looked = time.perf_counter_ns()
    sent, _ = _arrive(client, peer, b"data: 1\n\n")  # after the look, before the asking
    counts.ask(set(), looked)
    counts.ask()
    window = counts.window(fd, 9, time.perf_counter_ns())
    assert window is not None and window[0] <= sent <= window[1]


def test_an_asking_places_the_bytes_that_came_since_the_one_before(
    pair: tuple[socket.socket, socket.socket], counts: Received
) -> None:
    client, peer = pair
    fd = client.fileno()
    _arrive(client, peer, b"head")  # before the socket was held: not placed
    counts.watch(client)
    counts.ask()
    assert counts.window(fd, 4, 0) is None
    asked = time.perf_counter_ns()
    counts.ask()  # names nothing: nothing came
    sent, _ = _arrive(client, peer, b"data: 1\n\n")
    counts.ask()
    done = time.perf_counter_ns()
    window = counts.window(fd, 13, done)
    assert window is not None
    after, by = window
    # After the asking before the send (not the one before that), and by the asking's end.
    assert asked <= after <= sent <= by <= done
    # A byte not counted yet: after the last asking, by the time given (a peek's).
    later = counts.window(fd, 14, done + 1)
    assert later is not None and later[1] == done + 1 and later[0] >= sent


def test_a_reader_taking_the_data_between_askings_keeps_the_window_open(
    pair: tuple[socket.socket, socket.socket], counts: Received
) -> None:
    """epoll names a socket only while it holds data: one the loop's select returned may have
    its data taken by its reader before the next asking, which then does not name it although
    bytes came. Those bytes' window must reach back to before they came, not to that asking
    (it did: 126 events through the openai SDK at 150 streams were placed up to 8.8 ms after
    they were sent, session 21)."""
    client, peer = pair
    fd = client.fileno()
    counts.watch(client)
    counts.selected({fd})  # returned: its reader may run in this pass
    sent, _ = _arrive(client, peer, b"data: 1\n\n")
    client.recv(100)  # the reader takes it
    counts.ask()  # a probe later in the pass: not named (empty)
    _arrive(client, peer, b"data: 2\n\n")
    counts.ask()  # named: the count takes in both events
    window = counts.window(fd, 9, time.perf_counter_ns())
    assert window is not None
    assert window[0] <= sent <= window[1]
    counts.selected(set())  # the next select reads the count of what the pass read
    client.recv(100)
    # Not returned by the select: nothing reads it, and an asking that does not name it says
    # nothing came.
    asked = time.perf_counter_ns()
    counts.ask()
    sent, _ = _arrive(client, peer, b"data: 3\n\n")
    counts.ask()
    window = counts.window(fd, 27, time.perf_counter_ns())
    assert window is not None and asked <= window[0] <= sent <= window[1]


def test_a_returned_socket_still_holding_data_when_not_named_had_nothing_new(
    pair: tuple[socket.socket, socket.socket], counts: Received
) -> None:
    """A socket its reader has not reached yet in the pass holds its data; a probe that finds
    it holding data (the monitor's level-triggered epoll) and the asking does not name had
    nothing come since it was last named, taken or not."""
    client, peer = pair
    fd = client.fileno()
    counts.watch(client)
    _arrive(client, peer, b"data: 1\n\n")
    counts.selected({fd})  # named and counted; held apart as returned
    counts.ask({fd})  # holding data, not named
    asked = time.perf_counter_ns()
    counts.ask({fd})
    sent, _ = _arrive(client, peer, b"data: 2\n\n")
    counts.ask()
    window = counts.window(fd, 18, time.perf_counter_ns())
    assert window is not None and asked <= window[0] <= sent <= window[1]
    # Not holding data (the reader took it): no such word.
    client.recv(100)
    counts.ask(set())
    marked = time.perf_counter_ns()
    counts.ask(set())
    sent, _ = _arrive(client, peer, b"data: 3\n\n")
    client.recv(100)
    counts.ask(set())
    counts.selected(set())
    window = counts.window(fd, 27, time.perf_counter_ns())
    assert window is not None and window[0] <= marked <= sent <= window[1]


def test_where_the_reads_ended_and_what_is_forgotten(
    pair: tuple[socket.socket, socket.socket], counts: Received
) -> None:
    client, peer = pair
    fd = client.fileno()
    counts.watch(client)
    _arrive(client, peer, b"a" * 10)
    assert counts.read_to(fd) == 0
    client.recv(4)
    assert counts.read_to(fd) == 4
    counts.ask()
    assert counts.window(fd, 10, 0) is not None
    counts.placed(fd, 11)  # read past it: forgotten
    assert counts.window(fd, 10, 0) is None
    counts.forget(fd)
    assert counts.read_to(fd) is None and counts.count(fd) is None


def test_a_socket_far_behind_keeps_its_newest_counts(
    pair: tuple[socket.socket, socket.socket], counts: Received
) -> None:
    client, peer = pair
    fd = client.fileno()
    counts.watch(client)
    for _ in range(KEPT_COUNTS + 5):
        _arrive(client, peer, b"z")
        counts.ask()
    total = KEPT_COUNTS + 5
    assert counts.window(fd, total, 0) is not None
    assert counts.window(fd, total - KEPT_COUNTS + 1, 0) is not None
    assert counts.window(fd, total - KEPT_COUNTS, 0) is None  # its count dropped


def test_a_closed_epoll_places_nothing_more(
    pair: tuple[socket.socket, socket.socket], counts: Received
) -> None:
    client, peer = pair
    counts.watch(client)
    epoll = counts._epoll  # the askings fail from here on
    epoll.close()
    counts.ask()
    _arrive(client, peer, b"data: 1\n\n")
    assert counts.window(client.fileno(), 9, 0) is None


@pytest.mark.parametrize(
    ("framing", "queue", "ends"),
    [
        (Framing.RAW, b"data: 1\n\ndata: 22\n\ndata: 3", [9, 19]),
        (Framing.RAW, b"data: 1\r\n\r\ndata: 2\n\n", [11, 20]),
        # Chunked: the ends in the queue's own bytes, between the size lines.
        (Framing.CHUNKED, b"9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n", [12, 26]),
        # An event's empty line split across two chunks: it ends in the second.
        (Framing.CHUNKED, b"8\r\ndata: 1\n\r\n1\r\n\n\r\n", [17]),
    ],
)
def test_a_queues_events_end_where_its_bytes_say(
    framing: Framing, queue: bytes, ends: list[int]
) -> None:
    buffer = bytearray(64)
    buffer[: len(queue)] = queue
    whole, _ = whole_events(buffer, len(queue), framing)
    offsets = event_end_offsets(buffer, len(queue), framing, whole)
    assert offsets == ends
    for end in ends:  # each just past an empty line
        assert queue[:end].endswith((b"\n\n", b"\r\n\r\n")) or framing is Framing.CHUNKED


def test_a_queue_whose_events_cannot_be_found_places_none() -> None:
    buffer = bytearray(64)
    queue = b"data: 1\n\n"
    buffer[: len(queue)] = queue
    assert event_end_offsets(buffer, len(queue), Framing.TLS, 1) is None
    assert event_end_offsets(buffer, len(queue), Framing.RAW, -1) is None
    assert event_end_offsets(buffer, len(queue), Framing.RAW, 2) is None  # miscounted


@pytest.mark.skipif(not hasattr(select, "epoll"), reason="epoll is Linux's")
def test_the_monitors_probe_asks_the_counts(pair: tuple[socket.socket, socket.socket]) -> None:
    from pytest_latency.capture._drains import PROBE_EVERY_NS, Drains

    client, peer = pair
    drains = Drains.open()
    assert drains is not None and drains.received is not None
    try:
        fd = client.fileno()
        drains.watch(fd, 0, client)
        start = time.perf_counter_ns()
        drains.probe(start)
        sent, _ = _arrive(client, peer, b"data: 1\n\n")
        drains.probe(start + PROBE_EVERY_NS)
        window = drains.received.window(fd, 9, 0)
        assert window is not None and window[0] <= sent <= window[1]
        assert window[1] > 0  # counted by the probe, not left to the caller's time
    finally:
        drains.close()


def test_streams_behind_a_busy_loop_are_placed_and_never_read_back_before_they_were_sent() -> None:
    """Thirty streams through httpx2, each consumer burning CPU a chunk on the loop, against the
    simulator in a process of its own: the loop's passes grow long and consumers fall behind
    now and then (0.2 ms a chunk: a few calls in 30 flagged, here), and the byte counts place
    events in the queues the peeks copy (hundreds here). A time read back
    from a placed event is never before the simulator began to write it (the counts' "by" is
    after the bytes came); and each call unflagged is within the target of what was sent
    (their "after" holds: an unsound one narrowed bounds under late stamps), give or take
    1 ms of the simulator's notes."""
    import asyncio

    import httpx2
    from remote_sim import content_times, error_span_ms, paced, remote_simulator, truth_log

    from pytest_latency import instrument
    from pytest_latency.metrics import STAMP_TARGET_MS, call_metrics
    from pytest_latency.wire import WireRecord

    def burn(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    with remote_simulator(*paced(decode_ms_per_token=10.0, output_tokens=30)) as base:

        async def main() -> list[tuple[str, WireRecord]]:
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "q"}]}

            async def stream(i: int) -> tuple[str, WireRecord]:
                sink: list[WireRecord] = []
                # A client each, so that each record pairs with the server's id of its request.
                async with instrument(httpx2.AsyncClient(timeout=30), sink=sink.append) as client:
                    await asyncio.sleep(i * 0.003)
                    url = f"{base}/v1/chat/completions"
                    async with client.stream("POST", url, json=body) as r:
                        rid = r.headers["x-sim-request-id"]
                        async for _ in r.aiter_bytes():
                            burn(0.0002)
                (record,) = sink
                return rid, record

            return await asyncio.gather(*(stream(i) for i in range(30)))

        calls = asyncio.run(main())
        truths = {t.request_id: t for t in truth_log(base)}
    assert len(calls) == 30
    assert sum(len(r.span_passes) for _, r in calls) > 0  # placed some
    for rid, record in calls:
        m = call_metrics(record)
        truth = truths[rid]
        times = content_times(record, m)
        # Read back no earlier than the write began (its notes' span), give or take 0.5 ms of
        # the simulator's own clock reads around its writes.
        for shown, event in zip(times, truth.content_events, strict=True):
            assert shown >= event.sent_span_ns[0] - 500_000, (shown - event.sent_span_ns[0]) / 1e6
        least, _ = error_span_ms(times, truth)
        if not m.flagged:
            assert least <= STAMP_TARGET_MS + 1, (least, m.stamp_error_max_ms)
