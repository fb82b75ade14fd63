"""Security of what is stored: no request headers or API keys anywhere, no prompt or output text
in the per-test data unless `--latency-capture-text=N` asks for it (and then capped at N)."""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Iterator

import anthropic
import openai
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam

import pytest_latency.sim  # noqa: F401
from pytest_latency import instrument
from pytest_latency.recording import Recording
from pytest_latency.sim import LatencyModel, SimServer
from pytest_latency.testdata import TestData
from pytest_latency.wire import WireRecord

pytest_plugins = ["pytester"]

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
API_KEY = "sk-test-DISTINCTIVE-7f3a9c51e2"
PROMPT = "The secret prompt: PURPLE-OKAPI-4471 " * 4


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    server = SimServer(LatencyModel.preset("instant"))
    server.start()
    yield server
    server.stop()


def _everything(recording: Recording) -> str:
    """Every stored byte of the records and of the per-test data, as one string."""
    parts = [json.dumps(TestData.of(recording.measured(), None).to_wire())]
    for entry in recording.entries:
        for f in dataclasses.fields(WireRecord):
            parts.append(repr(getattr(entry.record, f.name)))
    return "\n".join(parts)


def test_no_header_or_api_key_is_stored_by_either_sdk(sim: SimServer) -> None:
    assert "headers" not in {f.name for f in dataclasses.fields(WireRecord)}
    recording = Recording("t")
    oa = instrument(
        openai.OpenAI(base_url=sim.openai_base_url, api_key=API_KEY), sink=recording.sink
    )
    an = instrument(
        anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key=API_KEY),
        sink=recording.sink,
    )
    # instrument keeps each client's type: the SDKs' own message types apply.
    chat_messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": PROMPT}]
    for _ in oa.chat.completions.create(model="m", messages=chat_messages, stream=True):
        pass
    messages: list[MessageParam] = [{"role": "user", "content": PROMPT}]
    an.messages.create(model="m", max_tokens=16, messages=messages)
    oa.close()
    an.close()
    assert len(recording.entries) == 2
    stored = _everything(recording)
    assert API_KEY not in stored
    assert "Bearer" not in stored and "x-api-key" not in stored.lower()
    # The request body (prompt included) lives in the record during the test, never in the data.
    data = json.dumps(TestData.of(recording.measured(), None).to_wire())
    assert all(e.record.request_body for e in recording.entries)
    assert "PURPLE-OKAPI" not in data
    assert "request_body" not in data
    output = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in recording.entries[0].record.body.decode().splitlines()
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    )
    assert len(output) > 10 and output not in data
    for call in recording.calls():
        assert call.final.prompt_text is None and call.final.output_text is None
        assert call.final.prompt_chars and call.final.prompt_chars > len(PROMPT)


INNER = f"""
import pytest

def test_text(openai_client, latency, request):
    openai_client.chat.completions.create(
        model="m", messages=[{{"role": "user", "content": {PROMPT!r}}}])
    (call,) = latency.calls
    print("PROMPT", repr(call.final.prompt_text))
    print("OUTPUT", repr(call.final.output_text))
"""


def _printed(out: str, label: str) -> str:
    """The string the inner test printed after `label` (its repr, read back literally)."""
    line = next(line for line in out.splitlines() if label in line)
    value = ast.literal_eval(line.split(label, 1)[1])
    assert isinstance(value, str)
    return value


@pytest.mark.parametrize("limit", [0, 12, 100_000])
def test_capture_text_keeps_at_most_n_characters(pytester: pytest.Pytester, limit: int) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_inner=INNER)
    args = ["--latency-sim=instant", "-s", f"--latency-json={pytester.path / 'out.json'}"]
    if limit:
        args.append(f"--latency-capture-text={limit}")
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    written = (pytester.path / "out.json").read_text()
    if limit == 0:
        out.index("PROMPT None")
        out.index("OUTPUT None")
        assert "PURPLE-OKAPI" not in written
        return
    prompt = _printed(out, "PROMPT ")
    output = _printed(out, "OUTPUT ")
    assert 0 < len(prompt) <= limit and 0 < len(output) <= limit
    # What --help promises (issue #15, item 15): on the call record, never in the result file.
    assert prompt not in written and output not in written
    help_text = " ".join(pytester.runpytest("--help").stdout.str().split())
    assert "never in the result file or the reports" in help_text
    if limit == 12:
        assert len(prompt) == 12 and prompt == "user: The se"
    else:
        assert "PURPLE-OKAPI-4471" in prompt


def test_capture_text_rejects_a_bad_value(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_inner="def test_x():\n    pass\n")
    pytester.runpytest("--latency-capture-text=-1").stderr.fnmatch_lines(
        ["*'-1' is not a character count*"]
    )
    pytester.makeini(f"{INI}latency_capture_text = lots\n")
    pytester.runpytest().stderr.fnmatch_lines(["*latency_capture_text*not a character count*"])
