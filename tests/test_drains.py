"""The loop monitor's mid-pass probes (`capture._drains`): when each captured socket was last
seen holding nothing, on real loopback sockets and Linux's epoll."""

from __future__ import annotations

import select
import selectors
import socket
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from pytest_latency.capture import _stream
from pytest_latency.capture._drains import PROBE_EVERY_NS, Drains
from pytest_latency.capture._queued import Framing
from pytest_latency.wire import WireRecord

pytestmark = pytest.mark.skipif(not hasattr(select, "epoll"), reason="epoll is Linux's")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    yield client, peer
    for s in (client, peer, server):
        s.close()


@pytest.fixture
def drains() -> Iterator[Drains]:
    opened = Drains.open()
    assert opened is not None
    yield opened
    opened.close()


def _settle(sock: socket.socket, want: bool) -> None:
    """Wait until `sock` holds data (or not), as epoll will say: loopback delivers within
    the send, but leave room for a busy machine."""
    for _ in range(500):
        ready, _, _ = select.select([sock], [], [], 0)
        if bool(ready) == want:
            return
        time.sleep(0.001)
    raise AssertionError("the socket never settled")


def test_a_probe_sees_a_socket_empty_until_data_comes_and_again_once_read(
    pair: tuple[socket.socket, socket.socket], drains: Drains
) -> None:
    client, peer = pair
    fd = client.fileno()
    t = 1_000_000_000
    drains.watch(fd, t)
    assert drains.empty_at(fd) is None  # no probe yet
    drains.probe(t + PROBE_EVERY_NS)
    assert drains.empty_at(fd) == t + PROBE_EVERY_NS
    # Too soon after the last probe, or after the loop's select: no probe, nothing new.
    drains.probe(t + PROBE_EVERY_NS + 1)
    assert drains.empty_at(fd) == t + PROBE_EVERY_NS
    drains.selected(t + 3 * PROBE_EVERY_NS)
    drains.probe(t + 3 * PROBE_EVERY_NS + 1)
    assert drains.empty_at(fd) == t + PROBE_EVERY_NS
    drains.probe(t + 4 * PROBE_EVERY_NS)
    assert drains.empty_at(fd) == t + 4 * PROBE_EVERY_NS
    # Data came: each probe while it waits names the socket; the last empty stays the one
    # before it came.
    peer.send(b"data: x\n\n")
    _settle(client, True)
    drains.probe(t + 5 * PROBE_EVERY_NS)
    drains.probe(t + 6 * PROBE_EVERY_NS)
    assert drains.empty_at(fd) == t + 4 * PROBE_EVERY_NS
    # Read: empty again at the next probe.
    client.recv(100)
    _settle(client, False)
    drains.probe(t + 7 * PROBE_EVERY_NS)
    assert drains.empty_at(fd) == t + 7 * PROBE_EVERY_NS
    # Forgotten, then held again: a probe before that says nothing of it.
    drains.forget(fd)
    assert drains.empty_at(fd) is None
    drains.watch(fd, t + 10 * PROBE_EVERY_NS)
    assert drains.empty_at(fd) is None  # the last probe was before it was held again
    drains.probe(t + 11 * PROBE_EVERY_NS)
    assert drains.empty_at(fd) == t + 11 * PROBE_EVERY_NS


def test_a_socket_holding_data_when_first_probed_was_never_seen_empty(
    pair: tuple[socket.socket, socket.socket], drains: Drains
) -> None:
    client, peer = pair
    peer.send(b"data: x\n\n")
    _settle(client, True)
    drains.watch(client.fileno(), 0)
    drains.probe(PROBE_EVERY_NS)
    drains.probe(2 * PROBE_EVERY_NS)
    assert drains.empty_at(client.fileno()) is None
    client.recv(100)
    _settle(client, False)
    drains.probe(3 * PROBE_EVERY_NS)
    assert drains.empty_at(client.fileno()) == 3 * PROBE_EVERY_NS


class _FullEpoll:
    """An epoll whose answers fill the room they are given: one may have left a socket out."""

    def __init__(self) -> None:
        self.registered: set[int] = set()
        self.full = False

    def register(self, fd: int, events: int) -> None:
        self.registered.add(fd)

    def unregister(self, fd: int) -> None:
        self.registered.discard(fd)

    def poll(self, timeout: float, room: int) -> list[tuple[int, int]]:
        if self.full:
            return [(1000 + i, select.EPOLLIN) for i in range(room)]
        return []

    def close(self) -> None:
        pass


def test_a_full_answer_says_nothing_and_starts_over() -> None:
    """epoll answers at most `room` descriptors: one left out would pass for empty, so a full
    answer drops what the probes knew."""
    epoll = _FullEpoll()
    drains = Drains(epoll)  # type: ignore[arg-type]  # a stand-in with epoll's methods
    drains.watch(7, 0)
    drains.probe(PROBE_EVERY_NS)
    assert drains.empty_at(7) == PROBE_EVERY_NS
    epoll.full = True
    drains.probe(2 * PROBE_EVERY_NS)
    assert drains.empty_at(7) is None
    epoll.full = False
    drains.probe(3 * PROBE_EVERY_NS)
    assert drains.empty_at(7) == 3 * PROBE_EVERY_NS


def test_a_pass_notes_the_drained_time_only_where_the_sockets_bytes_are_in_the_clear(
    pair: tuple[socket.socket, socket.socket], drains: Drains
) -> None:
    """TLS and HTTP/2 hold bytes above the socket: what a pass hands on there may be older than
    the socket's last empty. And a socket closed since, whose number another has now, says
    nothing of the old one."""
    client, _ = pair
    fd = client.fileno()
    drains.watch(fd, 0)
    drains.probe(PROBE_EVERY_NS)  # empty then
    key = SimpleNamespace(fd=fd, data=None)
    for framing, noted in (
        (Framing.TLS, False),
        (Framing.OPAQUE, False),
        (Framing.RAW, True),
        (Framing.CHUNKED, True),
    ):
        record = WireRecord("POST", "http://h/v1/chat/completions", b"{}", 0)
        peer = _stream._Peer(client, False, framing)
        peer.records.append(record)
        _stream._drained([(key, selectors.EVENT_READ)], {fd: peer}, 7, drains, [])  # type: ignore[list-item]
        assert list(record.drained_passes) == ([7] if noted else []), framing
        if noted:
            assert list(record.drained_ns) == [PROBE_EVERY_NS]
    closed = socket.socket()
    closed.close()
    record = WireRecord("POST", "http://h/v1/chat/completions", b"{}", 0)
    peer = _stream._Peer(closed, False, Framing.RAW)
    peer.records.append(record)
    _stream._drained([(key, selectors.EVENT_READ)], {fd: peer}, 7, drains, [])  # type: ignore[list-item]
    assert not record.drained_passes
