"""capture's typing: `instrument` hands back what it was given, typed as given, so an
instrumented SDK client keeps its methods' types for mypy.

Checked twice: `assert_type` in this module (tests/ is in mypy's files, so the lint gate fails on
a regression), and a mypy run on a snippet from within the suite (so pytest fails on one too)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest

import pytest_latency
from pytest_latency import capture, instrument

if sys.version_info >= (3, 11):
    from typing import assert_type
else:
    from typing_extensions import assert_type


def test_instrument_keeps_the_clients_type() -> None:
    an = instrument(anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9"))
    oa = instrument(openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9"))
    http = capture.instrument_http_client(httpx2.Client())
    assert_type(an, anthropic.Anthropic)
    assert_type(oa, openai.AsyncOpenAI)
    assert_type(http, httpx2.Client)
    assert capture.is_wrapped(an._client._transport)
    assert capture.is_wrapped(oa._client._transport)
    assert capture.is_wrapped(http._transport)
    an.close()
    http.close()


@pytest.mark.slow
def test_mypy_reveals_the_type_instrument_was_given(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    src = Path(pytest_latency.__file__).resolve().parents[1]  # the copy under test
    (tmp_path / "mypy.ini").write_text(f"[mypy]\nmypy_path = {src}\nstrict = true\n")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from pytest_latency import instrument
            from pytest_latency.capture import instrument_http_client

            class Client:
                def create(self) -> int:
                    return 1

            reveal_type(instrument(Client()))
            reveal_type(instrument(Client(), read_ahead=True).create())
            reveal_type(instrument_http_client(Client()))
            """
        )
    )
    stdout, stderr, status = api.run(
        [
            "--config-file",
            str(tmp_path / "mypy.ini"),
            "--cache-dir",
            str(tmp_path / "cache"),
            str(snippet),
        ]
    )
    revealed = [
        line.split("Revealed type is ")[1] for line in stdout.splitlines() if "Revealed" in line
    ]
    assert revealed == ['"snippet.Client"', '"int"', '"snippet.Client"'], stdout + stderr
    assert status == 0 and "no issues" in stdout, stdout + stderr
