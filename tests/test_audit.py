"""The capture audit: LLM traffic no captured client made is named, a clean suite stays quiet."""

from __future__ import annotations

import http.client
import json
import socket
import sys
import types
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from pytest_latency import audit
from pytest_latency.attribution import CAPTURING
from pytest_latency.sim import LatencyModel, SimServer

BODY = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
HEADERS = {"content-type": "application/json"}

pytest_plugins = ["pytester"]


@pytest.fixture
def listener() -> Iterator[int]:
    """A port that accepts connections (the backlog holds them; nothing answers)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield int(server.getsockname()[1])


@pytest.fixture
def log(listener: int) -> Iterator[audit.Audit]:
    owner = ["test_a"]
    log = audit.Audit(lambda: owner[0], [f"http://127.0.0.1:{listener}/v1"])
    previous = audit.activate(log)
    try:
        yield log
    finally:
        audit.activate(previous)


def _connect(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def test_a_connection_outside_capture_to_an_endpoint_is_named(
    log: audit.Audit, listener: int
) -> None:
    _connect(listener)
    _connect(listener)
    token = CAPTURING.set(True)  # what a binding does around the attempt it records
    try:
        _connect(listener)
    finally:
        CAPTURING.reset(token)
    (escape,) = log.escapes()
    assert escape.endpoint == f"127.0.0.1:{listener}"
    assert escape.connections == 2 and escape.tests == {"test_a": 2}
    assert escape.describe() == f"127.0.0.1:{listener}: 2 connections (test_a ×2)"
    assert log.connections_of("test_a") == [escape] and log.connections_of("other") == []


def test_connections_elsewhere_and_after_deactivation_are_not_llm_traffic(
    log: audit.Audit, listener: int
) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        _connect(int(other.getsockname()[1]))  # not an endpoint
    assert log.connects and log.escapes() == []
    audit.activate(None)
    _connect(listener)
    assert log.escapes() == []


def test_provider_hosts_and_merging() -> None:
    assert audit.is_provider_host("api.anthropic.com")
    assert audit.is_provider_host("my-resource.openai.azure.com")
    assert audit.is_provider_host("bedrock-runtime.us-east-1.amazonaws.com")
    assert not audit.is_provider_host("s3.amazonaws.com")
    assert not audit.is_provider_host("example.com")
    a = audit.Escape("h:1", 2, {"t1": 2}, {"t1": 5})
    b = audit.Escape("h:1", 1, {"t2": 1})
    assert audit.merge([a, b]) == [audit.Escape("h:1", 3, {"t1": 2, "t2": 1}, {"t1": 5})]
    assert audit.Escape.from_dict(a.to_dict()) == a
    # A result file written before requests were counted reads as none seen.
    assert audit.Escape.from_dict({"endpoint": "h:1", "connections": 1}).requests == {}


def test_requests_on_a_kept_alive_http_client_connection_are_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """http.client raises an audit event per piece it sends: each request's request line is
    counted on its connection, which is counted once."""
    with SimServer(LatencyModel(ttfb_ms=0, decode_ms_per_token=0, output_tokens=2)) as sim:
        url = urlsplit(sim.openai_base_url)
        owner = ["test_a"]
        log = audit.Audit(lambda: owner[0], [sim.openai_base_url])
        previous = audit.activate(log)
        try:
            conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
            for who in ("test_a", "test_a", "test_b"):
                owner[0] = who
                conn.request("POST", f"{url.path}/chat/completions", json.dumps(BODY), HEADERS)
                assert conn.getresponse().read()
            conn.close()
        finally:
            audit.activate(previous)
    (escape,) = log.escapes()
    assert (escape.connections, escape.tests, escape.requests) == (
        1,
        {"test_a": 1},
        {"test_a": 2, "test_b": 1},
    )
    assert escape.describe() == (
        f"{escape.endpoint}: 1 connection, 3 requests seen on them "
        "(test_a: 1 connection, 2 requests, test_b: 0 connections, 1 request)"
    )
    (of_b,) = log.connections_of("test_b")
    assert (of_b.connections, of_b.requests) == (0, {"test_b": 1})
    assert audit.summary([escape]).startswith(
        "1 connection and 3 requests on them to LLM endpoints bypassed capture (connections are "
        "counted, requests only where http.client sent them"
    )


def test_with_aiodns_loaded_the_provider_hosts_are_looked_up_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """c-ares's lookups raise no audit event, so a connection to a provider's address matches
    nothing looked up; with aiodns loaded the listable provider hosts are resolved at the end."""
    looked: list[str] = []

    def resolve(host: str, port: int) -> set[str]:
        looked.append(host)
        return {"203.0.113.7"} if host == "api.openai.com" else set()

    monkeypatch.setattr(audit, "_addresses", resolve)
    log = audit.Audit(lambda: "test_a")
    log.connected(("203.0.113.7", 443))
    assert log.escapes() == [] and looked == []  # aiodns not loaded: no lookups at the end
    monkeypatch.setitem(sys.modules, "aiodns", types.ModuleType("aiodns"))
    (escape,) = log.escapes()
    assert escape.endpoint == "api.openai.com:443" and escape.tests == {"test_a": 1}
    assert "openai.azure.com" not in looked and "amazonaws.com" not in looked
    count = len(looked)
    log.escapes()
    assert len(looked) == count  # once a session


SUITE = """
import asyncio
import http.client
import json
from urllib.parse import urlsplit

import aiohttp
import pytest

BODY = {"model": "m", "messages": [{"role": "user", "content": "q"}]}


def test_clean(openai_client):
    openai_client.chat.completions.create(**BODY)


def test_raw_http_client(llm_sim):
    url = urlsplit(llm_sim.openai_base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    for _ in range(2):  # one connection, kept alive
        conn.request("POST", url.path + "/chat/completions", json.dumps(BODY),
                     {"content-type": "application/json"})
        assert conn.getresponse().read()
    conn.close()


@pytest.mark.latency("e2e.p50 < 1s")
def test_budgeted_aiohttp(llm_sim):
    async def run():
        async with aiohttp.ClientSession() as session:
            async with session.post(llm_sim.openai_base_url + "/chat/completions",
                                    json=BODY) as response:
                await response.read()
    asyncio.run(run())
"""


@pytest.fixture
def tester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester


def test_a_run_names_the_unwrapped_clients_and_a_budgeted_test_says_what_it_saw(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(test_suite=SUITE)
    result = tester.runpytest(
        "--latency-sim=instant",
        "--latency-json=out.json",
        "--latency-report=out.html",
        "--latency-markdown=out.md",
    )
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    audit_lines = out[out.index("latency capture audit") :].splitlines()[1:3]
    assert "2 connections, 2 requests seen on them" in audit_lines[0], audit_lines
    assert "test_suite.py::test_raw_http_client: 1 connection, 2 requests" in audit_lines[0]
    assert "test_budgeted_aiohttp" in audit_lines[0]
    assert "test_clean" not in out[out.index("latency capture audit") :]
    result.stdout.fnmatch_lines(
        ["*made no captured LLM call*", "*It connected to LLM endpoints outside captured clients*"]
    )
    data = json.loads((tester.path / "out.json").read_text(encoding="utf-8"))
    (finding,) = [f for f in data["session"]["findings"] if f["kind"] == "capture_escaped"]
    assert (finding["evidence"]["connections"], finding["evidence"]["requests"]) == (2, 2)
    # One text: the terminal's headline is the finding's message, the result file's too.
    assert f"pytest-latency: {finding['message']}" in out
    assert finding["message"].startswith("2 connections and 2 requests on them to LLM endpoints")
    for report in ("out.html", "out.md"):  # the reports show the session's finding too
        text = (tester.path / report).read_text(encoding="utf-8")
        assert "Traffic that bypassed capture" in text and "2 requests on them" in text, report
    (endpoint,) = finding["evidence"]["endpoints"]
    assert set(endpoint["tests"]) == {
        "test_suite.py::test_raw_http_client",
        "test_suite.py::test_budgeted_aiohttp",
    }


def test_auto_capture_leaves_nothing_to_name_and_a_clean_run_is_quiet(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(test_suite=SUITE.replace("def test_raw_http_client", "def _unused"))
    result = tester.runpytest("--latency-sim=instant", "--latency-capture=auto")
    result.assert_outcomes(passed=2)
    assert "capture audit" not in result.stdout.str()
    assert "bypassed capture" not in result.stdout.str()


def test_xdist_workers_send_their_escapes_to_the_controller(tester: pytest.Pytester) -> None:
    tester.makepyfile(test_suite=SUITE)
    result = tester.runpytest_subprocess(
        "-p", "xdist", "-n", "2", "--latency-sim=instant", "--latency-json=out.json"
    )
    result.assert_outcomes(passed=2, failed=1)
    data = json.loads((tester.path / "out.json").read_text(encoding="utf-8"))
    (finding,) = [f for f in data["session"]["findings"] if f["kind"] == "capture_escaped"]
    assert finding["evidence"]["connections"] == 2
    result.stdout.fnmatch_lines(["*latency capture audit*"])
