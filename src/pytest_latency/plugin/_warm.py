"""The SDKs' first-use work, done before the first measured call of a process.

Owns `warm(provider)`: once per process and SDK, every streaming path the fixtures hand out is
run once against a private simulator, unmeasured. The first call of a process through an SDK
builds its pydantic models lazily (openai's Responses event union: ~400 ms after
`response.created`; anthropic's stream events: ~60 ms) and imports its stream helpers, all
between two reads of a body whose next events have already arrived, so the measured ttft of that
call was the SDK's pace (issue #14, item 2: 416 ms against 16 ms). Warming moves that work into
fixture setup, where no test is measured; `metrics` still flags a first content event found
buffered after a long absence, for clients nobody warmed.

May import the SDKs, `sim` and `attribution`; runs only from fixtures and `instrument` hooks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

# Process state on purpose, like an import cache: what has been warmed stays warm for the
# process, whichever session (pytester runs nest sessions) asked first.
_WARMED: set[str] = set()
_LOCK = threading.Lock()

_MESSAGES = [{"role": "user", "content": "warm up"}]


def _openai(base_url: str, sdk: Any) -> None:
    client = sdk.OpenAI(base_url=f"{base_url}/v1", api_key="warm-up", max_retries=0)
    with client:
        for _ in client.chat.completions.create(model="warm", messages=_MESSAGES, stream=True):
            pass
        client.chat.completions.create(model="warm", messages=_MESSAGES)
        for _ in client.responses.create(model="warm", input="warm up", stream=True):
            pass
        with client.responses.stream(model="warm", input="warm up") as stream:
            for _ in stream:
                pass
        client.responses.create(model="warm", input="warm up")


def _anthropic(base_url: str, sdk: Any) -> None:
    client = sdk.Anthropic(base_url=base_url, api_key="warm-up", max_retries=0)
    with client:
        for _ in client.messages.create(
            model="warm", max_tokens=8, messages=_MESSAGES, stream=True
        ):
            pass
        with client.messages.stream(model="warm", max_tokens=8, messages=_MESSAGES) as stream:
            for _ in stream:
                pass
        client.messages.create(model="warm", max_tokens=8, messages=_MESSAGES)


_PATHS: dict[str, Callable[[str, Any], None]] = {"openai": _openai, "anthropic": _anthropic}


def warm(provider: str) -> None:
    """Run `provider`'s SDK paths once in this process (no-op after the first time, and for an
    SDK that is not installed). Best effort: a path an SDK version lacks is skipped."""
    if provider in _WARMED or provider not in _PATHS:
        return
    with _LOCK:
        if provider in _WARMED:
            return
        _WARMED.add(provider)
        try:
            sdk = __import__(provider)
        except ImportError:
            return
        from pytest_latency.attribution import set_sink
        from pytest_latency.sim import LatencyModel, SimServer

        # No sink while warming: under --latency-capture=auto these calls would otherwise be
        # recorded as the current test's setup calls.
        previous = set_sink(None)
        try:
            with SimServer(LatencyModel.preset("instant").replace(output_tokens=4), port=0) as sim:
                _PATHS[provider](sim.base_url, sdk)
        except Exception:  # an SDK version without one of these paths: warm what ran
            pass
        finally:
            set_sink(previous)


def warm_imported() -> None:
    """Warm every SDK this process has imported: a measured test's module (or its conftest)
    imported it to build its own clients, for `instrument()` or `--latency-capture=auto`."""
    import sys

    for provider in _PATHS:
        if provider in sys.modules:
            warm(provider)


__all__ = ["warm", "warm_imported"]
