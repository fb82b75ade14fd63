"""The Gemini adapter (`metrics/apis/gemini_generate_content.py`) on crafted streams and bodies,
shaped as the recordings in tests/corpus/sdk/pydantic-ai/gemini-*.sse show Gemini's: every
chunk a whole GenerateContentResponse, events ended by CRLF blank lines, usage a complete
snapshot on each chunk, a finishReason on the last. (The recordings themselves go through
google-genai in tests/test_sdk_corpus.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_metrics import make_record

from pytest_latency.metrics import AUDIO, REASONING, TEXT, TOOL, CallMetrics, call_metrics
from pytest_latency.metrics.apis import gemini_generate_content as gemini

HOST = "https://generativelanguage.googleapis.com"
STREAM_URL = f"{HOST}/v1beta/models/gemini-2.5-flash:streamGenerateContent"
WHOLE_URL = f"{HOST}/v1beta/models/gemini-2.5-flash:generateContent"
REQUEST = json.dumps({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}).encode()


def usage(prompt: int = 10, candidates: int = 0, thoughts: int = 0, **more: Any) -> dict[str, Any]:
    """`usageMetadata` as Gemini writes it: zero counts left out."""
    out: dict[str, Any] = {"promptTokenCount": prompt}
    if candidates:
        out["candidatesTokenCount"] = candidates
    out["totalTokenCount"] = prompt + candidates + thoughts + more.get("toolUsePromptTokenCount", 0)
    if thoughts:
        out["thoughtsTokenCount"] = thoughts
    out.update(more)
    return out


def chunk(*parts: dict[str, Any], finish: str | None = None, **top: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-2.5-flash", **top}


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\r\n\r\n"


def stream(*payloads: dict[str, Any], eof: bool = True, url: str = STREAM_URL) -> CallMetrics:
    """One chunk a read, 10 ms apart from 10 ms."""
    chunks = [(10.0 * (i + 1), sse(p)) for i, p in enumerate(payloads)]
    return call_metrics(make_record(url, chunks, body=REQUEST, headers_ms=5.0, eof=eof))


def whole(payload: dict[str, Any], status: int = 200, url: str = WHOLE_URL) -> CallMetrics:
    record = make_record(
        url,
        [(20.0, json.dumps(payload).encode())],
        body=REQUEST,
        status=status,
        content_type="application/json; charset=UTF-8",
    )
    return call_metrics(record)


def test_a_text_stream_times_its_chunks_and_reads_the_latest_usage() -> None:
    m = stream(
        chunk({"text": "The"}, usageMetadata=usage(15)),
        chunk({"text": " capital is"}, usageMetadata=usage(15, 3)),
        chunk({"text": " Paris."}, finish="STOP", usageMetadata=usage(13, 8)),
    )
    assert (m.api, m.model, m.stream, m.error, m.incomplete) == (
        "gemini.generate_content",
        "gemini-2.5-flash",  # the URL's: the body names no model
        True,
        None,
        False,
    )
    assert (m.ttft, m.ttfo, m.e2e, m.itl) == (10_000.0, 10_000.0, 30_000.0, (10_000.0, 10_000.0))
    assert m.channels == (TEXT,) and m.content_events == 3
    # The final chunk's counts win, prompt included (13, not the first chunks' 15).
    assert (m.input_tokens, m.output_tokens, m.reasoning_tokens) == (13, 8, 0)
    assert m.tpot == pytest.approx(20_000.0 / 7)
    assert m.output_digests  # the answer's text reached the fingerprints


def test_thought_parts_are_reasoning_and_output_counts_the_thoughts() -> None:
    m = stream(
        chunk({"text": "**Planning**", "thought": True}, usageMetadata=usage(34, 0, 68)),
        chunk({"text": "**More**", "thought": True}, usageMetadata=usage(34, 0, 298)),
        # The first answer part carries the thought signature; it is text all the same.
        chunk(
            {"text": "Look both ways", "thoughtSignature": "c2ln"}, usageMetadata=usage(34, 4, 298)
        ),
        chunk({"text": " and cross."}, finish="STOP", usageMetadata=usage(34, 9, 298)),
    )
    assert m.channels == (REASONING, TEXT)
    assert (m.ttft, m.ttfo, m.e2e) == (10_000.0, 30_000.0, 40_000.0)
    assert (m.input_tokens, m.output_tokens, m.reasoning_tokens) == (34, 9 + 298, 298)
    # tpot is per generated token, the thinking included.
    assert m.tpot == pytest.approx(30_000.0 / (9 + 298 - 1))


def test_a_function_call_is_tool_content_delivered_whole() -> None:
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
    m = stream(
        chunk({**call, "thoughtSignature": "c2ln"}, usageMetadata=usage(29, 10, 202)),
        chunk({"text": ""}, finish="STOP", usageMetadata=usage(29, 10, 202)),
    )
    assert m.channels == (TOOL,) and m.content_events == 1  # the empty finish part is nothing
    assert m.ttft == m.ttfo == m.e2e == 10_000.0
    assert (m.output_tokens, m.reasoning_tokens) == (212, 202)
    assert m.error is None and not m.incomplete
    # The arguments are an output piece: a later request carrying them back is recognised.
    assert len(m.output_digests) == 1


def test_code_and_generated_audio_are_content_and_the_tool_s_result_is_not() -> None:
    m = stream(
        chunk({"executableCode": {"language": "PYTHON", "code": "print(6 * 7)"}}),
        chunk({"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "42\n"}}),
        chunk({"inlineData": {"mimeType": "audio/pcm", "data": "AAAA"}}, finish="STOP"),
    )
    assert m.channels == (TOOL, AUDIO) and m.content_events == 2
    assert (m.ttft, m.e2e) == (10_000.0, 30_000.0)


def test_cached_tokens_are_part_of_the_prompt_and_absent_means_zero() -> None:
    counts = usage(373, 89, 167, cachedContentTokenCount=204)
    cached = whole(chunk({"text": "ok"}, finish="STOP", usageMetadata=counts))
    assert (cached.input_tokens, cached.cache_read_tokens, cached.output_tokens) == (373, 204, 256)
    assert cached.cache_fields_reported and cached.cache_write_tokens is None
    assert (cached.stream, cached.ttft, cached.e2e) == (False, None, 20_100.0)
    # Gemini leaves a zero count out: a usage report without the cache field read nothing.
    plain = whole(chunk({"text": "ok"}, finish="STOP", usageMetadata=usage(12, 3)))
    assert plain.cache_read_tokens == 0 and plain.cache_fields_reported


def test_tool_use_prompt_tokens_are_input() -> None:
    # pydantic-ai's web-search cassette: total 572 = 17 + 41 + 102 (tool use prompt) + 412.
    m = stream(
        chunk(
            {"text": "Sunny"},
            finish="STOP",
            usageMetadata=usage(17, 41, 412, toolUsePromptTokenCount=102),
        )
    )
    assert m.input_tokens is not None and m.output_tokens is not None
    assert (m.input_tokens, m.output_tokens) == (17 + 102, 41 + 412)
    assert m.input_tokens + m.output_tokens == 572


@pytest.mark.parametrize(
    ("fields", "tier"),
    [
        ({"serviceTier": "standard"}, "standard"),
        ({"trafficType": "ON_DEMAND_FLEX"}, "flex"),  # Vertex AI
        ({}, None),
    ],
)
def test_the_service_tier_is_the_usage_s(fields: dict[str, Any], tier: str | None) -> None:
    m = stream(chunk({"text": "OK"}, finish="STOP", usageMetadata=usage(5, 1, **fields)))
    assert m.service_tier == tier


def test_an_error_chunk_mid_stream_is_an_sse_error() -> None:
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    m = stream(chunk({"text": "Hel"}, usageMetadata=usage(5, 1)), error)
    assert (m.error, m.error_detail) == ("sse_error:UNAVAILABLE", "The model is overloaded.")
    assert m.content_events == 1 and m.output_tokens == 1  # what arrived before it


def test_an_http_error_body_names_google_s_status() -> None:
    error = {"error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED"}}
    m = whole(error, status=429, url=STREAM_URL)
    assert (m.error, m.error_detail) == ("http_429", "RESOURCE_EXHAUSTED")
    assert m.stream is True  # the path asked for a stream, whatever came back
    assert (m.model, m.input_tokens) == ("gemini-2.5-flash", None)


def test_a_stream_cut_before_its_finish_reason_is_truncated_and_an_early_break_incomplete() -> None:
    first = chunk({"text": "The"}, usageMetadata=usage(15, 1))
    second = chunk({"text": " end"}, usageMetadata=usage(15, 2))
    cut = stream(first, second)
    assert cut.error == "truncated" and cut.output_tokens == 2
    early = stream(first, second, eof=False)  # the test stopped reading
    assert early.incomplete and early.error is None
    # A finish reason is the end: a client that stops there read the whole answer.
    done = stream(first, chunk({"text": "."}, finish="STOP", usageMetadata=usage(15, 3)), eof=False)
    assert not done.incomplete and done.error is None


def test_a_blocked_prompt_is_answered_with_feedback() -> None:
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": usage(8)}
    m = stream(blocked)
    assert (m.error, m.incomplete, m.content_events) == (None, False, 0)
    assert "prompt blocked: SAFETY" in m.notes and m.input_tokens == 8


def test_the_request_names_model_and_stream_in_its_path() -> None:
    assert gemini.request("/v1beta/models/gemini-2.5-flash:streamGenerateContent", None) == (
        "gemini-2.5-flash",
        True,
    )
    vertex = (
        "/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro:generateContent"
    )
    assert gemini.request(vertex, {"model": "ignored"}) == ("gemini-2.5-pro", False)
    assert gemini.request("/v1beta/tunedModels/my%20model:generateContent", None) == (
        "my model",
        False,
    )


def test_an_unrecognised_path_is_sniffed_as_gemini_by_its_chunks() -> None:
    m = stream(
        chunk({"text": "Hi"}, finish="STOP", usageMetadata=usage(4, 1)),
        url="https://proxy.internal/route/7",
    )
    assert (m.api, m.content_events, m.output_tokens) == ("gemini.generate_content", 1, 1)
    assert m.model == "gemini-2.5-flash"  # the server's modelVersion, the path naming none


def test_the_prompt_fingerprint_reads_gemini_s_contents_and_system_instruction() -> None:
    system = "You are terse. " * 40
    body = {
        "systemInstruction": {"parts": [{"text": system}], "role": "user"},
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
    }
    record = make_record(
        STREAM_URL,
        [(10.0, sse(chunk({"text": "Hey"}, finish="STOP", usageMetadata=usage(3, 1))))],
        body=json.dumps(body).encode(),
    )
    m = call_metrics(record)
    assert m.prompt_chars == len(f"system: {system}\nuser: Hi\n")
    assert m.prefix_hashes  # 620 characters: two whole 256-character blocks
