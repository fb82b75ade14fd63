"""Hostile values from servers and tests (issue #15, items 1, 2, 3 and 5): a usage count no model
can have, NaN handed to `latency.record`, an API key quoted by an exception, and control
characters in a server's error type. Nothing crashes, nothing leaks, nothing measured is lost:
the bad value is an error on its own call (or in its own test) and everything else stands."""

from __future__ import annotations

import json
import math
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_metrics import make_record

from pytest_latency import instrument
from pytest_latency.metrics import call_metrics
from pytest_latency.metrics._usage import MAX_TOKEN_COUNT
from pytest_latency.recording import Recording
from pytest_latency.untrusted import REDACTED, header_secrets, one_line, redact, safe_token
from pytest_latency.wire import WireRecord

HUGE = 10**400  # a 401-digit count: int(), json and Python accept it; float arithmetic does not
KEY = "sk-ant-api03-" + "Q" * 40  # the shape of a real key, not one
# A gateway's own token, of no provider's shape: only the request's headers say it is secret.
PLAIN = "zq7" + "K" * 29


# Every output a run writes, and no plugin reordering the tests.
OUTPUTS = (
    "--latency-json=out.json",
    "--latency-report=out.html",
    "--latency-markdown=out.md",
    "-p",
    "no:randomly",
)


def _sse(*events: tuple[str | None, dict[str, Any] | str]) -> bytes:
    out = b""
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out += (f"event: {name}\n" if name else "").encode() + f"data: {text}\n\n".encode()
    return out


def _record(url: str, body: bytes, *, status: int = 200) -> WireRecord:
    """A stream read in one piece per event, 10 ms apart (headers at 5 ms)."""
    pieces = [piece + b"\n\n" for piece in body.split(b"\n\n") if piece]
    return make_record(
        url,
        [(10.0 * (i + 1), piece) for i, piece in enumerate(pieces)],
        headers_ms=5.0,
        status=status,
    )


def _chat(usage: dict[str, Any]) -> bytes:
    # json.dumps writes the 401-digit int as digits, as a hostile server would.
    return _sse(
        (None, {"choices": [{"index": 0, "delta": {"content": "Hi"}}], "model": "gpt-x"}),
        (None, {"choices": [{"index": 0, "delta": {"content": " there"}}], "model": "gpt-x"}),
        (None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        (None, {"choices": [], "usage": usage}),
        (None, "[DONE]"),
    )


# ---- item 1: usage values out of any sane range ------------------------------------------------


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 10, "completion_tokens": HUGE},
        {"prompt_tokens": HUGE, "completion_tokens": 5},
        {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": HUGE},
        },
        {"prompt_tokens": -3, "completion_tokens": 5},
        {"prompt_tokens": 10, "completion_tokens": MAX_TOKEN_COUNT + 1},
    ],
)
def test_a_usage_count_out_of_range_is_an_error_of_that_call_with_its_timing_kept(
    usage: dict[str, Any],
) -> None:
    metrics = call_metrics(_record("http://h/v1/chat/completions", _chat(usage)))
    assert metrics.error == "bad_usage"
    assert metrics.error_detail is not None and "out of range" in metrics.error_detail
    assert len(metrics.error_detail) < 200  # never the 401 digits
    # The timing came from the content events and stands; the counts of the dropped object do not.
    assert metrics.ttft == pytest.approx(10_000.0) and metrics.e2e == pytest.approx(20_000.0)
    assert metrics.output_tokens is None and metrics.tpot is None


def test_a_sane_usage_count_at_the_bound_is_kept() -> None:
    usage = {"prompt_tokens": MAX_TOKEN_COUNT, "completion_tokens": 3}
    metrics = call_metrics(_record("http://h/v1/chat/completions", _chat(usage)))
    assert metrics.error is None and metrics.input_tokens == MAX_TOKEN_COUNT
    assert metrics.tpot == pytest.approx(5_000.0)  # (20 ms - 10 ms) / (3 - 1)


def test_anthropic_usage_out_of_range_keeps_the_counts_read_before_it() -> None:
    start = {
        "type": "message_start",
        "message": {"model": "claude-x", "usage": {"input_tokens": 12, "output_tokens": 1}},
    }
    body = _sse(
        ("message_start", start),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "Hi"}}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                           "usage": {"output_tokens": HUGE}}),
        ("message_stop", {"type": "message_stop"}),
    )  # fmt: skip
    metrics = call_metrics(_record("http://h/v1/messages", body))
    assert metrics.error == "bad_usage"
    assert metrics.input_tokens == 12  # message_start's counts stand
    assert metrics.ttft == pytest.approx(20_000.0)


def test_a_parser_bug_is_an_error_of_its_call_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_latency.metrics import _call

    def broken(*args: object) -> object:
        raise OverflowError("int too large to convert to float: Bearer " + KEY)

    monkeypatch.setattr(_call, "scan_body", broken)
    metrics = call_metrics(_record("http://h/v1/chat/completions", _chat({})))
    assert metrics.error == "metrics_error" and metrics.error_detail == "OverflowError"
    assert metrics.t_end_ns > metrics.t_start_ns  # where the call sat in time stays
    assert KEY not in json.dumps(metrics.to_dict())


# ---- items 3 and 5: secrets and control characters in what servers and exceptions say -----------


def test_header_values_and_key_shapes_are_redacted() -> None:
    secrets = header_secrets([f"Bearer {KEY}\n", "application/json", "0"])
    message = f"Illegal header value {(f'Bearer {KEY}' + chr(10)).encode()!r}"
    assert KEY not in redact(message, secrets) and REDACTED in redact(message, secrets)
    # Without the headers the key's shape alone gives it away.
    for leaked in (
        KEY,
        "sk-proj-" + "a1" * 20,
        "AIza" + "b" * 35,
        "xai-" + "c" * 30,
        "gsk_" + "d" * 30,
    ):
        assert leaked not in redact(f"invalid key {leaked}: check it"), leaked
    # Short values ("0", "gzip") are not hidden: they would garble every message.
    assert (
        redact("retry 0 of 2 with gzip", header_secrets(["0", "gzip"])) == "retry 0 of 2 with gzip"
    )


def test_server_strings_become_one_printable_line() -> None:
    hostile = (
        "overloaded\n::error file=INJECTED.py,line=1::forged\r\n::add-mask::x\x1b[2J\u202eevil"
    )
    token = safe_token(hostile)
    assert re.fullmatch(r"[^\s\x00-\x1f\x7f-\x9f\u202a-\u202e]+", token), token
    assert not token.startswith("::") and "\n" not in token
    line = one_line(hostile, 40)
    assert "\n" not in line and "\x1b" not in line and len(line) <= 40 and line.endswith("…")


def test_an_injected_error_type_is_one_word_in_the_call_and_its_detail_one_line() -> None:
    hostile = "overloaded\n::error file=INJECTED.py,line=1::forged\n::add-mask::x\x1b[2J"
    error = {"type": hostile, "message": f"bad\nkey {KEY}\x1b[31m"}
    body = _sse(("error", {"type": "error", "error": error}))
    metrics = call_metrics(_record("http://h/v1/messages", body))
    assert metrics.error is not None and metrics.error.startswith("sse_error:overloaded")
    assert not re.search(r"[\s\x00-\x1f\x7f]", metrics.error)
    assert metrics.error_detail is not None
    assert KEY not in metrics.error_detail and not re.search(r"[\x00-\x1f]", metrics.error_detail)


@pytest.fixture
def sink_port() -> Iterator[int]:
    """A loopback port that takes connections and never answers: h11 checks headers as it sends
    them, so the client must get as far as a connection. The kernel completes the handshakes
    into the listen backlog; nothing calls `accept()`. (A thread blocked in `accept()` here was
    the bug in tests/test_hostile_server.py: closing the socket does not wake it.)"""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as server:
        yield server.getsockname()[1]


def test_an_exception_quoting_the_api_key_never_reaches_the_record(sink_port: int) -> None:
    """The real failure: a key with a trailing newline makes h11 refuse the header and quote it
    (`LocalProtocolError("Illegal header value b'Bearer <key>\\n'")`), through the real httpx
    stack, with a custom `x-api-key` header too."""
    recording = Recording("t")
    cases = [({"authorization": f"Bearer {KEY}\n"}, KEY), ({"x-api-key": f"{KEY}\r\n"}, KEY)]
    cases.append(({"x-gateway-token": f"{PLAIN}\n"}, PLAIN))
    for headers, key in cases:
        client = instrument(httpx.Client(), sink=recording.sink)
        with client, pytest.raises(httpx.HTTPError) as raised:  # h11 refuses before connecting
            client.post(
                f"http://127.0.0.1:{sink_port}/v1/messages", headers=headers, json={"model": "m"}
            )
        assert key in str(raised.value), "the leak is real"
    finals = [c.final for c in recording.calls()]
    assert len(finals) == 3 and all(f.error for f in finals)
    for final in finals:
        text = json.dumps(final.to_dict())
        assert KEY not in text and PLAIN not in text, final.error_detail
        assert final.error_detail and REDACTED in final.error_detail


def test_the_key_reaches_no_output_of_a_run(pytester: pytest.Pytester, sink_port: int) -> None:
    """A whole run: the failing call's detail in the result file, the HTML and the Markdown
    carries no key, and the run still writes everything."""
    pytester.makepyfile(
        f"""
        import httpx, pytest
        from pytest_latency import instrument

        def test_leaky(latency):
            with instrument(httpx.Client()) as client:
                with pytest.raises(httpx.HTTPError):
                    client.post("http://127.0.0.1:{sink_port}/v1/chat/completions",
                                headers={{"authorization": "Bearer {KEY}\\n"}},
                                json={{"model": "m", "stream": True}})

        def test_after(latency):
            latency.record("ttft", 12, unit="ms")
        """
    )
    result = pytester.runpytest_subprocess(
        *OUTPUTS,
    )
    result.assert_outcomes(passed=2)
    for name in ("out.json", "out.html", "out.md"):
        text = Path(pytester.path, name).read_text(encoding="utf-8")
        assert KEY not in text, name
    data = json.loads(Path(pytester.path, "out.json").read_text(encoding="utf-8"))
    kinds = data["tests"][0]["error_kinds"]
    assert kinds and all(REDACTED in (k["detail"] or "") for k in kinds.values()), kinds
    assert KEY not in result.stdout.str()


INNER_ANTHROPIC_KEY = """
import anthropic, pytest

@pytest.mark.latency("error_rate < 1%", samples=1)
def test_leaky(anthropic_client):
    client = anthropic_client.with_options(max_retries=1)
    with pytest.raises(anthropic.APIConnectionError) as raised:
        client.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "q"}])
    assert "{key}" in repr(raised.value.__cause__), "the leak is real"

def test_after(latency):
    latency.record("ttft", 12, unit="ms")
"""


def test_an_anthropic_key_with_a_newline_reaches_no_output_of_a_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, sink_port: int
) -> None:
    """The anthropic SDK with ANTHROPIC_API_KEY ending in a newline (a key pasted from a file):
    h11 refuses the `x-api-key` header and quotes it, on each attempt. The failing test's error
    budget prints its errors; the key reaches neither that, nor the annotations, nor any file."""
    pytester.makepyfile(test_inner=INNER_ANTHROPIC_KEY.replace("{key}", KEY))
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY + "\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")  # the ::error annotations too
    result = pytester.runpytest_subprocess(
        f"--latency-anthropic-base-url=http://127.0.0.1:{sink_port}",
        *OUTPUTS,
    )
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    result.assert_outcomes(passed=1, failed=1)  # the error budget fails on the refused calls
    assert KEY not in output
    for name in ("out.json", "out.html", "out.md"):
        text = Path(pytester.path, name).read_text(encoding="utf-8")
        assert KEY not in text, name
    data = json.loads(Path(pytester.path, "out.json").read_text(encoding="utf-8"))
    leaky = next(t for t in data["tests"] if t["nodeid"].endswith("test_leaky"))
    kinds = leaky["error_kinds"]
    assert leaky["call_count"] == 1 and kinds["LocalProtocolError"]["attempts"] == 2, leaky
    assert all(REDACTED in (k["detail"] or "") for k in kinds.values()), kinds


INNER_AUTO_CAPTURE = """
import httpx2, pytest

@pytest.mark.latency(samples=2)
def test_huge_usage():
    with httpx2.Client(timeout=30) as client:
        with client.stream("POST", "{url}", json={"model": "m", "stream": True}) as response:
            for _ in response.iter_bytes():
                pass

def test_after(latency):
    latency.record("ttft", 12, unit="ms")
"""


@pytest.mark.slow
def test_malformed_usage_under_auto_capture_is_an_error_of_that_call(
    pytester: pytest.Pytester,
) -> None:
    """Under `--latency-capture=auto`, raw httpx2 calls to a server whose usage says 10^400
    tokens: it was "could not write its outputs: OverflowError", no file, exit 0. Now each such
    call is a `bad_usage` error, every test runs and every output is written."""
    from hostile_server import CHAT_PATH, HostileServer, events

    chunk = '{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}'
    huge = (
        '{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,'
        f'"completion_tokens":{HUGE},"total_tokens":9}}}}'
    )
    with HostileServer({CHAT_PATH: [events(chunk, huge, "[DONE]")]}) as server:
        pytester.makepyfile(test_inner=INNER_AUTO_CAPTURE.replace("{url}", server.url()))
        result = pytester.runpytest_subprocess(
            "--latency-capture=auto",
            *OUTPUTS,
        )
        assert server.served(CHAT_PATH) == 2
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "OverflowError" not in output, output[-3000:]
    assert "could not write" not in output, output[-3000:]
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.OK
    for name in ("out.html", "out.md"):
        assert Path(pytester.path, name).stat().st_size > 0, name
    data = json.loads(Path(pytester.path, "out.json").read_text(encoding="utf-8"))
    by_name = {t["nodeid"].rsplit("::", 1)[1]: t for t in data["tests"]}
    huge_usage = by_name["test_huge_usage"]
    assert huge_usage["call_count"] == 2 and huge_usage["errors"] == {"bad_usage": 2}
    detail = huge_usage["error_kinds"]["bad_usage"]["detail"]
    assert "out of range" in detail and len(detail) < 200, detail  # never the 401 digits
    assert by_name["test_after"]["metrics"]["ttft"]["count"] == 1


# ---- item 2: latency.record() with NaN, infinities and floats' overflow -------------------------


@pytest.mark.parametrize(
    ("value", "unit"),
    [
        (math.nan, "ms"),
        (math.inf, "s"),
        (-math.inf, "us"),
        (1e306, "s"),
        (HUGE, "ms"),
        ("12", "ms"),
    ],
)
def test_record_rejects_what_is_not_a_finite_number_at_the_call(value: object, unit: str) -> None:
    from pytest_latency.recording import LatencyRecorder

    recorder = LatencyRecorder(Recording("t"))
    with pytest.raises(
        ValueError, match=r"latency\.record\('ttft', .*not a finite number"
    ) as raised:
        recorder.record("ttft", value, unit=unit)  # type: ignore[arg-type]
    assert len(str(raised.value)) < 150


def test_a_nan_recorded_fails_its_test_and_the_run_keeps_its_outputs(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import math, pytest

        @pytest.mark.latency("ttft.p95 < 400ms", samples=3)
        def test_nan(latency):
            latency.record("ttft", math.nan, unit="ms")

        def test_unbudgeted_inf(latency):
            latency.record("e2e", float("inf"))

        @pytest.mark.latency("ttft.max < 400ms", samples=3)
        def test_fine(latency):
            latency.record("ttft", 12, unit="ms")
        """
    )
    result = pytester.runpytest_subprocess("--latency-json=out.json", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=2)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["*latency.record('ttft', nan): not a finite number*"])
    data = json.loads(Path(pytester.path, "out.json").read_text(encoding="utf-8"))
    fine = next(t for t in data["tests"] if t["nodeid"].endswith("test_fine"))
    assert fine["budgets"][0]["status"] == "pass"
    assert fine["metrics"]["ttft"]["count"] == 3


# ---- items 8 and 13: a budgets file nested past the parser, markers past the file's limits -----


@pytest.mark.parametrize(
    "nested",
    [
        "[[budget]]\nmatch = 'x'\nexpect = " + "[" * 5000 + "]" * 5000 + "\n",
        "[defaults]\nx = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n",
    ],
)
def test_a_budgets_file_nested_too_deep_is_a_usage_error_naming_it(
    pytester: pytest.Pytester, nested: str
) -> None:
    pytester.makefile(".toml", budgets=nested)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--latency-budget=budgets.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "budgets.toml" in err and "nested too deeply" in err
    assert "INTERNALERROR" not in err + result.stdout.str() and "RecursionError" not in err


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("samples=10**9", "samples=1000000000 is over the limit of 100,000"),
        ("samples=5, max_samples=10**12", "max_samples=1000000000000 is over the limit"),
        ("warmup=200_000", "warmup=200000 is over the limit"),
        ('"ttft.p95 < 400ms", "ttft.p95<0.4s"', "gives the same budget twice"),
    ],
)
def test_a_marker_has_the_limits_the_budgets_file_has(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.latency({marker})
        def test_x(latency):
            latency.record("ttft", 1, unit="ms")
        """
    )
    result = pytester.runpytest_subprocess()
    assert result.ret != pytest.ExitCode.OK
    output = result.stdout.str() + result.stderr.str()
    assert message in output, output[-2000:]
    assert "INTERNALERROR" not in output


# ---- issue #14, item 2: a long consumer absence before the first content event flags --------


def _chat_reads(gaps_ms: list[float], waits_ms: list[float]) -> WireRecord:
    """A Chat stream of role, two content deltas, usage and [DONE], one event a read: the
    consumer comes back `gaps_ms[i]` after read i-1 arrived and waits `waits_ms[i]` for it."""
    body = _chat({"prompt_tokens": 5, "completion_tokens": 2})
    role = _sse((None, {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
    pieces = [role] + [p + b"\n\n" for p in body.split(b"\n\n") if p]
    gaps = gaps_ms + [0.1] * (len(pieces) - len(gaps_ms))
    waits = waits_ms + [0.01] * (len(pieces) - len(waits_ms))
    at, chunks = 5.0, []
    for gap, wait, piece in zip(gaps, waits, pieces, strict=True):
        at += gap + wait
        chunks.append((at, piece))
    return make_record(
        "http://h/v1/chat/completions", chunks, headers_ms=5.0, waits_ms=waits, body=b"{}"
    )


def test_the_first_content_event_found_buffered_after_the_consumer_was_away_flags() -> None:
    # The SDK's first-use work: 400 ms away after the role chunk, and the delta was already there.
    late = call_metrics(_chat_reads([0.1, 400.0], [2.0, 0.01]))
    assert late.consumer_bound and late.error is None
    # The same absence while the server had not sent the delta yet: the read waited, the stamp
    # is the delta's arrival.
    waited = call_metrics(_chat_reads([0.1, 400.0], [2.0, 30.0]))
    assert not waited.consumer_bound
    # A prompt consumer: nothing to flag.
    prompt = call_metrics(_chat_reads([0.1, 0.2], [2.0, 5.0]))
    assert not prompt.consumer_bound


# ---- the same through a whole run against a hostile server and the real openai SDK -------------

INNER_HOSTILE = """
import openai, pytest

MESSAGES = [{"role": "user", "content": "hi"}]

@pytest.mark.latency(samples=2)
def test_huge_usage(openai_client):
    for _ in openai_client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        pass

def test_echoed_key(openai_client):
    with pytest.raises(openai.APIStatusError):
        openai_client.chat.completions.create(model="m", messages=MESSAGES)

@pytest.mark.latency("error_rate < 1%", samples=1)
def test_injected_error_type(openai_client):
    with pytest.raises(Exception):
        for _ in openai_client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
            pass
"""


@pytest.mark.slow
def test_a_hostile_server_breaks_nothing_in_a_whole_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Malformed usage, an error quoting the API key, an error type carrying a forged GitHub
    workflow command: every test runs, every output is written, no key and no control
    character reaches any of them (issue #15, items 1, 3 and 5)."""
    from hostile_server import HostileServer, echo_headers, events

    chunk = '{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}'
    huge = '{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,' + (
        f'"completion_tokens":{HUGE},"total_tokens":9}}}}'
    )
    forged = {"type": "error", "error": {"type": "overloaded\n::error file=INJECTED.py::forged\n"
                                          "::add-mask::x\x1b[2J", "message": "m"}}  # fmt: skip
    paths = "/v1/chat/completions"
    routes = {
        paths: [
            events(chunk, huge, "[DONE]"),
            events(chunk, huge, "[DONE]"),
            echo_headers(),
            events(chunk, forged),
        ]
    }
    pytester.makepyfile(test_inner=INNER_HOSTILE)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv(
        "GITHUB_ACTIONS", "true"
    )  # annotations on: the ::error lines a forgery aims at
    with HostileServer(routes) as server:
        result = pytester.runpytest_subprocess(
            f"--latency-openai-base-url={server.base_url}/v1",
            *OUTPUTS,
        )
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "OverflowError" not in output
    result.assert_outcomes(passed=2, failed=1)  # the error budget fails on the injected error
    assert KEY not in output
    # A workflow command counts only at the start of a line: no server text may begin one.
    starts = [line.lstrip() for line in output.splitlines()]
    assert not any(line.startswith(("::add-mask", "::error file=INJECTED")) for line in starts)
    assert "\x1b[2J" not in output
    for name in ("out.json", "out.html", "out.md"):
        text = Path(pytester.path, name).read_text(encoding="utf-8")
        assert KEY not in text and "\x1b" not in text and "INJECTED.py::forged\\n" not in text, name
    data = json.loads(Path(pytester.path, "out.json").read_text(encoding="utf-8"))
    by_name = {t["nodeid"].rsplit("::", 1)[1]: t for t in data["tests"]}
    assert set(by_name["test_huge_usage"]["errors"]) == {"bad_usage"}
    kinds = list(by_name["test_injected_error_type"]["errors"])
    assert len(kinds) == 1 and kinds[0].startswith("sse_error:overloaded_::error"), kinds


def test_a_stream_that_is_not_utf8_is_a_failed_call_as_the_sdk_says() -> None:
    """The openai SDK raises UnicodeDecodeError on a line that is not UTF-8; the call it
    failed is an error here too, not a success (issue #14, item 9)."""
    import openai
    from hostile_server import CHAT_PATH, HostileServer, stream

    head = b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"'
    good, bad = head + b'Hi"}}]}\n\n', head + b'\xff\xfe"}}]}\n\n'
    recording = Recording("t")
    with HostileServer({CHAT_PATH: [stream(lambda: [good, bad, b"data: [DONE]\n\n"])]}) as server:
        client = instrument(
            openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="k", max_retries=0, timeout=30),
            sink=recording.sink,
        )
        with client, pytest.raises(UnicodeDecodeError):
            for _ in client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "q"}], stream=True
            ):
                pass
    (call,) = recording.calls()
    assert call.final.error == "bad_encoding" and call.final.failed
    assert call.final.ttft is not None  # what arrived before it is still measured
