"""A hostile HTTP server on 127.0.0.1 for tests: canned misbehaviours and recorded bodies replayed
on a known schedule, served per path.

Owns the server (a `ThreadingHTTPServer` on a free port, in a daemon thread, stopped within
`STOP_TIMEOUT_S` or failing the test with a TimeoutError) and a small library of behaviours. A
behaviour is any callable that writes one whole response to the handler's socket; a path serves its
list of behaviours in turn, repeating the last (so a retry can meet a different one). Responses are
HTTP/1.0 style, ended by closing the connection, so a behaviour never has to know its length. A
client that goes away mid-response is not an error here.

Add a behaviour as one more factory below returning a `Behaviour`; tests compose them:

    with HostileServer({"/v1/chat/completions": [huge_line(30_000_000)]}) as server:
        httpx2.post(server.url("/v1/chat/completions"), ...)

Stdlib only; imports nothing from pytest_latency (it stands for someone else's server).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

Behaviour = Callable[[BaseHTTPRequestHandler], None]

CHAT_PATH = "/v1/chat/completions"


# How long stopping a server may take: the serve loop's poll, then every handler unblocked by the
# end of its connection. A stop that takes longer fails the test with a TimeoutError; never a hang.
STOP_TIMEOUT_S = 10.0
POLL_S = 0.05


class _Server(ThreadingHTTPServer):
    """The stdlib's threading server, made to stop in bounded time.

    Its listening socket does not block: `serve_forever` accepts after its selector said a
    connection is waiting, and a connection someone else accepted first (another thread blocked in
    `accept()` on the same descriptor number, see tests/test_hostile_server.py) would otherwise
    leave it in `accept()` for good, and `shutdown()` waiting on it for good. Handler threads are
    tracked with their connections so a stop can end the connections (unblocking a handler stuck
    writing to a client that stopped reading, or reading from one that never sends) and join each
    thread with a deadline, where `server_close()` joins them with none."""

    daemon_threads = True
    block_on_close = False  # HostileServer.__exit__ joins the handlers itself, with a deadline

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.socket.setblocking(False)
        self.live: dict[threading.Thread, socket.socket] = {}
        self.live_lock = threading.Lock()

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = self.socket.accept()  # BlockingIOError if it was taken: an OSError
        conn.setblocking(True)
        return conn, address

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(target=self._handle, args=(request, client_address), daemon=True)
        with self.live_lock:
            self.live[thread] = request
        thread.start()

    def _handle(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self.live_lock:
                self.live.pop(threading.current_thread(), None)

    def end_connections(self) -> list[threading.Thread]:
        """Shut every live connection down (a handler blocked on it returns at once); the
        handler threads still running."""
        with self.live_lock:
            live = list(self.live.items())
        for _, conn in live:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        return [thread for thread, _ in live]


class HostileServer:
    """Serve `routes` (path → behaviours, served in turn, the last repeating) on 127.0.0.1.

    Leaving the `with` block stops it within `stop_timeout_s` or raises TimeoutError naming what
    is stuck: it never hangs the suite."""

    def __init__(
        self,
        routes: Mapping[str, Sequence[Behaviour]],
        *,
        stop_timeout_s: float = STOP_TIMEOUT_S,
    ) -> None:
        self._routes = {path: list(behaviours) for path, behaviours in routes.items()}
        self._served = dict.fromkeys(self._routes, 0)
        self._lock = threading.Lock()
        self._stop_timeout_s = stop_timeout_s
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._serve(self)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                server._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the tests' output is not the place for an access log

        self._httpd = _Server(Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def base_url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def url(self, path: str = CHAT_PATH) -> str:
        return self.base_url + path

    def served(self, path: str) -> int:
        """How many requests `path` has answered."""
        return self._served.get(path, 0)

    def route(self, path: str, behaviours: Sequence[Behaviour]) -> None:
        """Serve `path` with these behaviours from now on, counting afresh: one server for many
        replays."""
        with self._lock:
            self._routes[path] = list(behaviours)
            self._served[path] = 0

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path.split("?", 1)[0]
        behaviours = self._routes.get(path)
        if not behaviours:
            handler.send_error(404)
            return
        with self._lock:
            index = self._served[path]
            self._served[path] = index + 1
        # A client that stops reading mid-response made its choice: not the server's error; nor
        # is the end of the connection when the server stops.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            behaviours[min(index, len(behaviours) - 1)](handler)

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving, end every connection and join every thread, within `stop_timeout_s`."""
        deadline = time.monotonic() + self._stop_timeout_s
        httpd = self._httpd
        # BaseServer.shutdown() waits for the serve loop with no timeout: wait for it here.
        stopper = threading.Thread(target=httpd.shutdown, daemon=True)
        stopper.start()
        with contextlib.suppress(OSError):
            httpd.socket.shutdown(socket.SHUT_RDWR)  # no new connections from here on
        stopper.join(max(deadline - time.monotonic(), 0))
        self._thread.join(max(deadline - time.monotonic(), 0))
        httpd.server_close()
        stuck = [name for name, thread in (("serve loop", self._thread),) if thread.is_alive()]
        for thread in httpd.end_connections():
            thread.join(max(deadline - time.monotonic(), 0))
            if thread.is_alive():
                stuck.append(f"handler {thread.name}")
        if stuck:
            raise TimeoutError(
                f"HostileServer({self.base_url}) did not stop within {self._stop_timeout_s:g} s: "
                + ", ".join(stuck)
                + " still running"
            )


# ---- behaviours ----------------------------------------------------------------------------------


def chat_event(content: str) -> bytes:
    """One OpenAI chat chunk carrying `content`, as an SSE event."""
    payload = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": content}}],
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


CHAT_END = (
    b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},'
    b'"finish_reason":"stop"}]}\n\n'
    b'data: {"object":"chat.completion.chunk","choices":[],'
    b'"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}\n\n'
    b"data: [DONE]\n\n"
)


def stream(
    pieces: Callable[[], Iterable[bytes]],
    *,
    content_type: str = "text/event-stream",
    headers: Mapping[str, str] | None = None,
) -> Behaviour:
    """A 200 whose body is `pieces()`, each written and flushed as it comes; the body ends when
    the server closes the connection."""

    def behave(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("content-type", content_type)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("connection", "close")
        handler.end_headers()
        for piece in pieces():
            handler.wfile.write(piece)
            handler.wfile.flush()

    return behave


def huge_line(size: int, piece: int = 65_536) -> Behaviour:
    """A chat stream whose second event is one `size`-byte line (a content delta of "x"s),
    written in `piece`-byte writes, then a normal end."""

    def pieces() -> Iterator[bytes]:
        yield chat_event("")
        yield b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"'
        block = b"x" * piece
        for _ in range(size // piece):
            yield block
        yield b"x" * (size % piece) + b'"}}]}\n\n'
        yield CHAT_END

    return stream(pieces)


def endless(seconds: float, event: bytes | None = None, burst: int = 64) -> Behaviour:
    """A chat stream that sends `event` as fast as it can (`burst` events a write) and never
    ends by itself; after `seconds` the server gives up and closes."""
    one = event if event is not None else chat_event("tok ")

    def pieces() -> Iterator[bytes]:
        block = one * burst
        deadline = time.monotonic() + seconds
        yield chat_event("")
        while time.monotonic() < deadline:
            yield block

    return stream(pieces)


def gzip_bomb(decoded_size: int, event: bytes | None = None) -> Behaviour:
    """A gzip-encoded chat stream that inflates to `decoded_size` bytes of `event`s (a few
    hundred kB on the wire), compressed as it is sent."""
    one = event if event is not None else chat_event("x")

    def pieces() -> Iterator[bytes]:
        packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        block = one * max(1, 1_048_576 // len(one))
        sent = 0
        for _ in itertools.count():
            if sent >= decoded_size:
                break
            out = packer.compress(block)
            sent += len(block)
            if out:
                yield out
        yield packer.compress(CHAT_END) + packer.flush()

    return stream(pieces, headers={"content-encoding": "gzip"})


def events(*payloads: Mapping[str, Any] | str, event: str | None = None) -> Behaviour:
    """A stream of these SSE payloads (a str is sent as the data line as it is: `[DONE]`, or
    JSON a test wrote by hand, such as a 400-digit token count)."""

    def pieces() -> Iterator[bytes]:
        for payload in payloads:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            head = f"event: {event}\n" if event else ""
            yield f"{head}data: {data}\n\n".encode()

    return stream(pieces)


def echo_headers(status: int = 401) -> Behaviour:
    """An error whose message quotes every request header, API key included, as careless
    gateways do ("Invalid key: Bearer sk-..."), with control characters in its type."""

    def behave(handler: BaseHTTPRequestHandler) -> None:
        quoted = "; ".join(f"{k}: {v}" for k, v in handler.headers.items())
        body = json.dumps(
            {"error": {"type": "auth\n::error::forged\x1b[2J", "message": f"rejected {quoted}"}}
        ).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return behave


def replay(
    pieces: Sequence[bytes],
    delays_s: Sequence[float],
    log: list[int],
    *,
    status: int = 200,
    content_type: str = "text/event-stream",
    headers: Mapping[str, str] | None = None,
) -> Behaviour:
    """A recorded body on a known schedule: `pieces[i]` is written `delays_s[i]` seconds after
    the piece before it (the first, after the headers), each flushed as it goes. `log` gets the
    `perf_counter_ns()` of the headers and of each piece, read just before its write, so no
    client in this process can stamp a piece before its entry: the replay's ground truth. A
    JSON body is sent with its length; a stream ends when the server closes, as servers do."""

    def behave(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("content-type", content_type)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        if content_type == "application/json":
            handler.send_header("content-length", str(sum(len(p) for p in pieces)))
        handler.send_header("connection", "close")
        log.append(time.perf_counter_ns())
        handler.end_headers()
        for piece, delay in zip(pieces, delays_s, strict=True):
            if delay > 0:
                time.sleep(delay)
            log.append(time.perf_counter_ns())
            handler.wfile.write(piece)
            handler.wfile.flush()

    return behave
