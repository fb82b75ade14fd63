"""The capture audit: connections made outside every captured attempt, to name what escaped.

Owns the process's audit hook and the log it fills while a session has one active. CPython
raises the audit events `socket.connect` for every connect and `socket.getaddrinfo` for every
lookup, whichever library makes them (http.client, requests, an unwrapped httpx client, aiohttp
with capture off). A binding marks the attempt it records (`attribution.CAPTURING`), so the
connections captured clients make are not counted; every other one is, with the test that was
running. The hook cannot be removed (Python's rule), so it is added once per process and does
nothing unless a log is active: one string test per audited event (imports, opens, ...).

Which of those connections were LLM traffic is decided once, at the end and off every hot path
(`Audit.escapes`): a connection to the address of a configured endpoint (the simulator, the
fixtures' base URLs) or of a provider's API host (`PROVIDER_HOSTS`) looked up during the run,
each resolved then.

Stdlib only besides `attribution`: the plugin activates it at configure, in every session.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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

Address = tuple[str, int]


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


@dataclass(frozen=True, slots=True)
class Escape:
    """Connections to one LLM endpoint that no captured client made."""

    endpoint: str  # host:port, as configured or as the provider's host
    connections: int
    tests: Mapping[str, int]  # node id (or "<session>") -> connections while it ran

    def describe(self) -> str:
        """The one line every output shows for it."""
        where = ", ".join(f"{t} ×{n}" if n > 1 else t for t, n in self.tests.items())
        plural = "s" if self.connections != 1 else ""
        return f"{self.endpoint}: {self.connections} connection{plural} ({where})"

    def to_dict(self) -> dict[str, object]:
        return {
            "endpoint": self.endpoint,
            "connections": self.connections,
            "tests": dict(self.tests),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Escape:
        tests = data.get("tests")
        return cls(
            str(data["endpoint"]),
            int(str(data["connections"])),
            {str(k): int(str(v)) for k, v in tests.items()} if isinstance(tests, dict) else {},
        )


def merge(escapes: Iterable[Escape]) -> list[Escape]:
    """Several processes' escapes (pytest-xdist workers') as one list, by endpoint."""
    by_endpoint: dict[str, Counter[str]] = {}
    for escape in escapes:
        by_endpoint.setdefault(escape.endpoint, Counter()).update(escape.tests)
    return [
        Escape(name, sum(tests.values()), dict(sorted(tests.items())))
        for name, tests in sorted(by_endpoint.items())
    ]


class Audit:
    """The log of one session: every connection outside a captured attempt, by address and by
    the test running when it was made, and the hostnames looked up (to resolve at the end)."""

    def __init__(self, owner: Callable[[], str | None], endpoints: Iterable[str] = ()) -> None:
        self._owner = owner
        self._lock = threading.Lock()
        self.connects: dict[Address, Counter[str]] = {}
        self.looked_up: set[Address] = set()
        self.endpoints: list[tuple[str, int]] = [e for e in map(endpoint_of, endpoints) if e]

    def add_endpoint(self, url: str) -> None:
        endpoint = endpoint_of(url)
        if endpoint is not None and endpoint not in self.endpoints:
            self.endpoints.append(endpoint)

    def connected(self, address: Address) -> None:
        owner = self._owner() or "<session>"
        with self._lock:
            self.connects.setdefault(address, Counter())[owner] += 1

    def looked(self, address: Address) -> None:
        with self._lock:
            self.looked_up.add(address)

    def connections_of(self, owner: str) -> list[Escape]:
        """The escapes made while `owner` ran (for a budgeted test that captured nothing)."""
        return [
            Escape(e.endpoint, e.tests[owner], {owner: e.tests[owner]})
            for e in self.escapes()
            if owner in e.tests
        ]

    def escapes(self) -> list[Escape]:
        """The connections that went to an LLM endpoint, by endpoint. Resolves the configured
        endpoints and the provider hosts looked up during the run: call it at the end."""
        with self._lock:
            connects = {a: Counter(c) for a, c in self.connects.items()}
            hosts = list(self.endpoints) + sorted(
                a for a in self.looked_up if is_provider_host(a[0]) and a not in self.endpoints
            )
        by_address: dict[Address, str] = {}
        for host, port in hosts:
            name = f"{host}:{port}"
            by_address.setdefault((host, port), name)
            for ip in _addresses(host, port):
                by_address.setdefault((ip, port), name)
        found: dict[str, Counter[str]] = {}
        for address, owners in sorted(connects.items()):
            endpoint = by_address.get(address)
            if endpoint is not None:
                found.setdefault(endpoint, Counter()).update(owners)
        return [
            Escape(name, sum(owners.values()), dict(sorted(owners.items())))
            for name, owners in sorted(found.items())
        ]


def _addresses(host: str, port: int) -> set[str]:
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError):
        return set()


class _Active:
    __slots__ = ("audit",)

    def __init__(self) -> None:
        self.audit: Audit | None = None


_active = _Active()
_hooked = threading.Lock()
_installed: list[bool] = []


def _hook(event: str, args: tuple[object, ...]) -> None:
    if not event.startswith("socket."):
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
    except (ValueError, TypeError, UnicodeError):  # an address family the audit does not read
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
