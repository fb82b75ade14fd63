"""The hostile server's own promise (tests/hostile_server.py): leaving its `with` block stops it
within its bound, or fails the test with a TimeoutError; it never hangs the suite.

The bug this guards (issue #15): a test's "sink" fixture closed its listening socket while its
thread sat in `accept()`. On Linux `close()` does not wake such a thread; it stays in the call on
the closed socket, and the descriptor number goes to the next socket opened, another test's
HostileServer. Any signal that thread then takes without a handler (a SIGCHLD: the openai SDK
runs `uname -p` for its platform headers) restarts `accept()` with the same number, now the
server's: the stale thread took the client's connection and dropped it (the client saw
"Server disconnected", a ResourceWarning failed the teardown), and the server's own thread,
woken for that connection, blocked in `accept()` on its blocking socket, so `shutdown()`, which
waits for it with no timeout, hung the run.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

import httpx2
import pytest
from hostile_server import CHAT_PATH, HostileServer, chat_event, stream

# Far above a stop's real cost (one 50 ms poll), far below a hang.
BOUND_S = 5.0


def _within(seconds: float, action: Callable[[], object]) -> None:
    """Run `action` in a thread: fail if it is still running after `seconds` (so a regression
    fails this test instead of hanging the suite), re-raise what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    if raised:
        raise raised[0]


def _one_chunk() -> HostileServer:
    return HostileServer({CHAT_PATH: [stream(lambda: [chat_event("hi")])]})


def test_a_client_that_connects_and_never_sends_does_not_hold_the_stop() -> None:
    # Its handler waits for a request line; server_close() would join it with no timeout.
    server = _one_chunk()
    with server, socket.create_connection(server.address):
        time.sleep(0.2)  # the handler is reading
        start = time.monotonic()
        _within(BOUND_S, server.stop)
    assert time.monotonic() - start < BOUND_S


def test_a_client_that_stops_reading_does_not_hold_the_stop() -> None:
    # An endless body to a client that read its headers and then nothing: the handler blocks in
    # a write once the socket buffers fill; the stop ends the connection under it.
    block = chat_event("x" * 4096) * 16
    server = HostileServer({CHAT_PATH: [stream(lambda: iter(lambda: block, b""))]})
    with server, httpx2.Client(timeout=10) as client:
        with client.stream("POST", server.url(), json={}) as response:
            assert response.status_code == 200
            time.sleep(0.3)  # the buffers fill; the handler is stuck in sendall
            _within(BOUND_S, server.stop)


def test_a_stuck_behaviour_fails_the_stop_loudly() -> None:
    release = threading.Event()

    def stuck(handler: BaseHTTPRequestHandler) -> None:
        release.wait(30)  # deaf to its connection's end

    server = HostileServer({CHAT_PATH: [stuck]}, stop_timeout_s=0.5)
    try:
        with pytest.raises(TimeoutError, match=r"did not stop within 0\.5 s: handler .* running"):
            with server, httpx2.Client(timeout=10) as client:
                # The server never answers: the client's read times out, or ends with the stop.
                with contextlib.suppress(httpx2.TransportError):
                    client.post(server.url(), json={}, timeout=1)
    finally:
        release.set()


def _accept_once(sink: socket.socket, into: list[socket.socket]) -> None:
    with contextlib.suppress(OSError):
        into.append(sink.accept()[0])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's accept() and close()")
def test_a_thread_stuck_in_accept_on_a_reused_descriptor_leaves_the_server_stoppable() -> None:
    """The bug, reproduced: threads blocked in `accept()` on closed sockets whose descriptor
    number now names the server's listening socket, their calls restarted. Against a blocking
    socket they took connections, and a server thread its selector had woken for one of them
    then blocked in `accept()` for good (a narrow window: this test rarely hits it, the suite's
    runs on a loaded machine did). The server's socket does not block, so a restarted call
    returns at once (or takes a connection already waiting), and the server answers the rest
    and stops within its bound."""
    server = _one_chunk()
    stolen: list[socket.socket] = []
    stale: list[tuple[socket.socket, int]] = []
    for _ in range(3):
        sink = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=_accept_once, args=(sink, stolen), daemon=True).start()
        stale.append((sink, sink.fileno()))
    time.sleep(0.2)  # each thread is in accept()
    try:
        with server:
            for sink, number in stale:
                sink.close()  # does not wake its thread
                os.dup2(server._httpd.socket.fileno(), number)  # the number reused, as it was
            # A signal without a handler restarts a blocked accept() with the same number: glibc
            # sends one to every thread on setgid(), as a child's exit sent SIGCHLD in the suite.
            os.setgid(os.getgid())
            answered = 0
            for _ in range(6):
                with contextlib.suppress(httpx2.TransportError):
                    httpx2.post(server.url(), json={}, timeout=2)
                    answered += 1
            assert answered >= 3  # the stale threads take at most one connection each
            _within(BOUND_S, server.stop)
    finally:
        for _, number in stale:
            with contextlib.suppress(OSError):
                os.close(number)
        for conn in stolen:
            conn.close()
