"""The capture audit: connections made outside every captured attempt, to name what escaped.

Owns the process's audit hook, the log it fills while a session has one active, and the words
every output uses for what it found (`Escape.describe`, `summary`). CPython raises the audit
events `socket.connect` for every connect and `socket.getaddrinfo` for every lookup, whichever
library makes them (http.client, requests, an unwrapped httpx client, aiohttp with capture off).
A binding marks the attempt it records (`attribution.CAPTURING`), so the connections captured
clients make are not counted; every other one is, with the test that was running. The hook
cannot be removed (Python's rule), so it is added once per process and does nothing unless a log
is active: one string test per audited event (imports, opens, ...).

What it counts is connections. A client that keeps its connection alive makes one for many
requests, and no audit event marks a request on asyncio's or httpx's sockets. http.client (and
what is built on it: urllib, requests, urllib3) raises `http.client.send` for each piece it
sends, and a request's first piece starts with its request line: those requests are counted
too, on the connection's peer address.

Which of those connections were LLM traffic is decided once, at the end and off every hot path
(`Audit.escapes`): a connection to the address of a configured endpoint (the simulator, the
fixtures' base URLs) or of a provider's API host (`PROVIDER_HOSTS`) looked up during the run,
each resolved then. A lookup through aiodns (c-ares, aiohttp's resolver when aiodns is
installed) raises no event: when aiodns was loaded and a connection matched nothing, the
provider hosts are resolved at the end as well (within `LATE_LOOKUP_S`), which finds the
connections of a host whose address has not changed since; Azure's and Bedrock's per-resource
hosts cannot be listed, so those stay unseen.

Stdlib only besides `attribution`: the plugin activates it at configure, in every session.
"""

from __future__ import annotations

import re
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pytest_latency.attribution import CAPTURING

# The hosted LLM APIs' hosts (a suffix matches a subdomain: Azure's per-resource hosts, Bedrock's
# per-region ones). Traffic to any other host counts only when it is a configured endpoint.
PROVIDER_HOSTS = (
    "api.anthropic.com",
    "api.openai.com",
    "openai.azure.com",
    "generativelanguage.googleapis.com",
    "aiplatform.googleapis.com",
    "api.groq.com",
    "api.x.ai",
    "api.mistral.ai",
    "openrouter.ai",
    "api.deepseek.com",
    "api.together.xyz",
    "api.fireworks.ai",
    "api.cohere.com",
    "api.perplexity.ai",
    "api.cerebras.ai",
    "amazonaws.com",  # bedrock-runtime.<region>.amazonaws.com only: see `is_provider_host`
)
# Entries that only match subdomains (a resource's, a region's): no host to look up by them.
_SUFFIXES_ONLY = frozenset({"openai.azure.com", "amazonaws.com"})

Address = tuple[str, int]
# The first piece of an HTTP/1 request http.client sends: its request line.
_REQUEST_LINE = re.compile(rb"[A-Z]+ [^ \r\n]+ HTTP/1\.[01]\r\n")
# How long the end of a session may wait for the provider hosts' late lookups (see the docstring).
LATE_LOOKUP_S = 1.0


def is_provider_host(host: str) -> bool:
    host = host.lower().rstrip(".")
    if host.endswith(".amazonaws.com"):
        return host.startswith("bedrock-runtime.")
    return any(host == h or host.endswith("." + h) for h in PROVIDER_HOSTS)


def endpoint_of(url: str) -> tuple[str, int] | None:
    """(host, port) of a base URL (None when it names no host)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname else None


def _counted(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


@dataclass(frozen=True, slots=True)
class Escape:
    """Connections to one LLM endpoint that no captured client made, and the HTTP requests seen
    on them (http.client's only: see the module docstring)."""

    endpoint: str  # host:port, as configured or as the provider's host
    connections: int
    tests: Mapping[str, int]  # node id (or "<session>") -> connections while it ran
    requests: Mapping[str, int] = field(default_factory=dict)  # node id -> requests seen

    @property
    def requests_seen(self) -> int:
        return sum(self.requests.values())

    def describe(self) -> str:
        """The one line every output shows for it."""
        owners = dict.fromkeys([*self.tests, *self.requests])
        where = ", ".join(_where(t, self.tests.get(t, 0), self.requests.get(t, 0)) for t in owners)
        counts = _counted(self.connections, "connection")
        if self.requests_seen:
            counts += f", {_counted(self.requests_seen, 'request')} seen on them"
        return f"{self.endpoint}: {counts} ({where})"

    def to_dict(self) -> dict[str, object]:
        return {
            "endpoint": self.endpoint,
            "connections": self.connections,
            "tests": dict(self.tests),
            "requests": dict(self.requests),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Escape:
        return cls(
            str(data["endpoint"]),
            int(str(data["connections"])),
            _counts(data.get("tests")),
            _counts(data.get("requests")),
        )


def _where(test: str, connections: int, requests: int) -> str:
    if not requests:
        return f"{test} ×{connections}" if connections > 1 else test
    return f"{test}: {_counted(connections, 'connection')}, {_counted(requests, 'request')}"


def _counts(value: object) -> dict[str, int]:
    return {str(k): int(str(v)) for k, v in value.items()} if isinstance(value, dict) else {}


def summary(escapes: Iterable[Escape]) -> str:
    """The headline of a run's escapes, the same wherever it is shown (the terminal, the
    session's finding, the result file): what is counted, and what a count of connections can
    hide."""
    escapes = list(escapes)
    connections = sum(e.connections for e in escapes)
    requests = sum(e.requests_seen for e in escapes)
    seen = f" and {_counted(requests, 'request')} on them" if requests else ""
    return (
        f"{_counted(connections, 'connection')}{seen} to LLM endpoints bypassed capture "
        "(connections are counted, requests only where http.client sent them: a client that "
        "keeps its connection alive sends many calls on one): "
        + "; ".join(e.describe() for e in escapes)
    )


def merge(escapes: Iterable[Escape]) -> list[Escape]:
    """Several processes' escapes (pytest-xdist workers') as one list, by endpoint."""
    tests: dict[str, Counter[str]] = {}
    requests: dict[str, Counter[str]] = {}
    for escape in escapes:
        tests.setdefault(escape.endpoint, Counter()).update(escape.tests)
        requests.setdefault(escape.endpoint, Counter()).update(escape.requests)
    return [_escape(name, tests[name], requests[name]) for name in sorted(tests)]


def _escape(endpoint: str, tests: Counter[str], requests: Counter[str]) -> Escape:
    return Escape(
        endpoint,
        sum(tests.values()),
        dict(sorted((+tests).items())),
        dict(sorted((+requests).items())),
    )


class Audit:
    """The log of one session: every connection outside a captured attempt and every request
    seen on one, by address and by the test running then, and the hostnames looked up (to
    resolve at the end)."""

    def __init__(self, owner: Callable[[], str | None], endpoints: Iterable[str] = ()) -> None:
        self._owner = owner
        self._lock = threading.Lock()
        self.connects: dict[Address, Counter[str]] = {}
        self.requests: dict[Address, Counter[str]] = {}
        self.looked_up: set[Address] = set()
        self.endpoints: list[tuple[str, int]] = [e for e in map(endpoint_of, endpoints) if e]
        self._late: dict[Address, str] | None = None  # the late lookups' (once per session)

    def add_endpoint(self, url: str) -> None:
        endpoint = endpoint_of(url)
        if endpoint is not None and endpoint not in self.endpoints:
            self.endpoints.append(endpoint)

    def connected(self, address: Address) -> None:
        owner = self._owner() or "<session>"
        with self._lock:
            self.connects.setdefault(address, Counter())[owner] += 1

    def requested(self, address: Address) -> None:
        owner = self._owner() or "<session>"
        with self._lock:
            self.requests.setdefault(address, Counter())[owner] += 1

    def looked(self, address: Address) -> None:
        with self._lock:
            self.looked_up.add(address)

    def connections_of(self, owner: str) -> list[Escape]:
        """The escapes made while `owner` ran (for a budgeted test that captured nothing)."""
        return [
            Escape(
                e.endpoint,
                e.tests.get(owner, 0),
                {owner: e.tests[owner]} if owner in e.tests else {},
                {owner: e.requests[owner]} if owner in e.requests else {},
            )
            for e in self.escapes()
            if owner in e.tests or owner in e.requests
        ]

    def escapes(self) -> list[Escape]:
        """The connections (and requests) that went to an LLM endpoint, by endpoint. Resolves
        the configured endpoints and the provider hosts looked up during the run: call it at the
        end."""
        with self._lock:
            connects = {a: Counter(c) for a, c in self.connects.items()}
            requests = {a: Counter(c) for a, c in self.requests.items()}
            hosts = list(self.endpoints) + sorted(
                a for a in self.looked_up if is_provider_host(a[0]) and a not in self.endpoints
            )
        by_address: dict[Address, str] = {}
        for host, port in hosts:
            name = f"{host}:{port}"
            by_address.setdefault((host, port), name)
            for ip in _addresses(host, port):
                by_address.setdefault((ip, port), name)
        if "aiodns" in sys.modules and any(a not in by_address for a in connects):
            if self._late is None:  # c-ares's lookups raised no event: see the module docstring
                self._late = _late_lookups()
            for address, name in self._late.items():
                by_address.setdefault(address, name)
        tests: dict[str, Counter[str]] = {}
        sent: dict[str, Counter[str]] = {}
        for address in sorted({*connects, *requests}):
            endpoint = by_address.get(address)
            if endpoint is not None:
                tests.setdefault(endpoint, Counter()).update(connects.get(address, {}))
                sent.setdefault(endpoint, Counter()).update(requests.get(address, {}))
        return [_escape(name, tests[name], sent[name]) for name in sorted(tests)]


def _addresses(host: str, port: int) -> set[str]:
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError):
        return set()


def _late_lookups() -> dict[Address, str]:
    """The HTTPS addresses of the provider hosts that can be listed (not Azure's or Bedrock's
    per-resource ones), each looked up in a thread of its own; whatever is not answered within
    `LATE_LOOKUP_S` is left out (daemon threads: a stuck resolver does not hold the exit)."""
    found: dict[Address, str] = {}
    lock = threading.Lock()

    def look(host: str) -> None:
        for ip in _addresses(host, 443):
            with lock:
                found.setdefault((ip, 443), f"{host}:443")

    threads = [
        threading.Thread(target=look, args=(host,), daemon=True, name=f"latency-lookup-{host}")
        for host in PROVIDER_HOSTS
        if host not in _SUFFIXES_ONLY
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + LATE_LOOKUP_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    with lock:
        return dict(found)


class _Active:
    __slots__ = ("audit",)

    def __init__(self) -> None:
        self.audit: Audit | None = None


_active = _Active()
_hooked = threading.Lock()
_installed: list[bool] = []


_EVENTS = ("socket.", "http.client.send")


def _hook(event: str, args: tuple[object, ...]) -> None:
    if not event.startswith(_EVENTS):
        return
    audit = _active.audit
    if audit is None or CAPTURING.get():
        return
    try:
        if event == "socket.connect":
            address = args[1]
            if isinstance(address, tuple) and len(address) >= 2:
                audit.connected((str(address[0]), int(address[1])))
        elif event == "socket.getaddrinfo":
            host, port = args[0], args[1]
            if isinstance(host, (str, bytes)):
                name = host.decode("idna") if isinstance(host, bytes) else host
                audit.looked((name, int(port) if isinstance(port, (int, str)) else 0))
        elif event == "http.client.send":
            connection, data = args
            if isinstance(data, (bytes, bytearray)) and _REQUEST_LINE.match(data):
                peer = getattr(connection, "sock", None)
                address = peer.getpeername() if isinstance(peer, socket.socket) else None
                if isinstance(address, tuple) and len(address) >= 2:
                    audit.requested((str(address[0]), int(address[1])))
    except (OSError, ValueError, TypeError, UnicodeError):  # an address the audit does not read
        return


def current() -> Audit | None:
    """The log connections go to now (None outside a session)."""
    return _active.audit


def activate(audit: Audit | None) -> Audit | None:
    """Make `audit` the log connections go to (None: none); return the one it replaces, which a
    nested session (pytester's inline runs) puts back when it ends."""
    with _hooked:
        if not _installed:
            sys.addaudithook(_hook)
            _installed.append(True)
    previous, _active.audit = _active.audit, audit
    return previous
