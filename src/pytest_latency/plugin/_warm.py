"""The SDKs' first-use work, done before the first measured call of a process.

Owns `warm(provider)`: once per process and SDK, every streaming path the fixtures hand out is
run once against a private simulator, unmeasured, through the SDK's sync client and then its
async one. The first call of a process through an SDK builds its pydantic models lazily
(openai's Responses event union: ~400 ms after `response.created`; anthropic's stream events:
~60 ms) and imports its stream helpers, all between two reads of a body whose next events have
already arrived, so the measured ttft of that call was the SDK's pace (issue #14, item 2: 416 ms
against 16 ms). The first async call pays besides for the HTTP stack's async half: httpcore2's
anyio backend and the loop's resolver thread pool are imported on the first async connection,
before the request is sent (ttfb +100 ms against the simulator's truth in a pytest run without
anyio's pytest plugin, which imports the backend at start; +14 ms in a script). Warming moves
that work into fixture setup, where no test is measured; `metrics` still flags a first content
event found buffered after a long absence, for clients nobody warmed.

The warm-up clients get the SDK's own default HTTP client with `verify=False` (google-genai's, and
its aiohttp requests, `ssl: False`): loading the CA bundle is 25 ms a client, a call never
repeats it, and the simulator speaks plain HTTP. google-genai's paths are its streamed and whole
`generate_content`, sync (httpx2) and async (aiohttp).

May import the SDKs, `sim`, `attribution` and `pricing` (to load the price table early); runs
only from fixtures and `instrument` hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any

# Process state on purpose, like an import cache: what has been warmed stays warm for the
# process, whichever session (pytester runs nest sessions) asked first.
_WARMED: set[str] = set()
_LOCK = threading.Lock()

_MESSAGES = [{"role": "user", "content": "warm up"}]


def _client(sdk: Any, name: str, base_url: str, *, is_async: bool) -> Any:
    """`sdk.<name>` on the SDK's own default HTTP client, without certificates (see above)."""
    http = getattr(sdk, "DefaultAsyncHttpxClient" if is_async else "DefaultHttpxClient", None)
    options: dict[str, Any] = {} if http is None else {"http_client": http(verify=False)}
    return getattr(sdk, name)(base_url=base_url, api_key="warm-up", max_retries=0, **options)


def _openai(base_url: str, sdk: Any) -> None:
    with _client(sdk, "OpenAI", f"{base_url}/v1", is_async=False) as client:
        for _ in client.chat.completions.create(model="warm", messages=_MESSAGES, stream=True):
            pass
        client.chat.completions.create(model="warm", messages=_MESSAGES)
        for _ in client.responses.create(model="warm", input="warm up", stream=True):
            pass
        with client.responses.stream(model="warm", input="warm up") as stream:
            for _ in stream:
                pass
        client.responses.create(model="warm", input="warm up")


async def _openai_async(base_url: str, sdk: Any) -> None:
    # The models are built by now (the sync paths ran first): what is left is the async stream
    # classes and the async HTTP stack, one call per streaming path.
    async with _client(sdk, "AsyncOpenAI", f"{base_url}/v1", is_async=True) as client:
        chat = await client.chat.completions.create(model="warm", messages=_MESSAGES, stream=True)
        async for _ in chat:
            pass
        async for _ in await client.responses.create(model="warm", input="warm up", stream=True):
            pass
        async with client.responses.stream(model="warm", input="warm up") as stream:
            async for _ in stream:
                pass


def _anthropic(base_url: str, sdk: Any) -> None:
    with _client(sdk, "Anthropic", base_url, is_async=False) as client:
        for _ in client.messages.create(
            model="warm", max_tokens=8, messages=_MESSAGES, stream=True
        ):
            pass
        with client.messages.stream(model="warm", max_tokens=8, messages=_MESSAGES) as stream:
            for _ in stream:
                pass
        client.messages.create(model="warm", max_tokens=8, messages=_MESSAGES)


async def _anthropic_async(base_url: str, sdk: Any) -> None:
    async with _client(sdk, "AsyncAnthropic", base_url, is_async=True) as client:
        messages = await client.messages.create(
            model="warm", max_tokens=8, messages=_MESSAGES, stream=True
        )
        async for _ in messages:
            pass
        async with client.messages.stream(model="warm", max_tokens=8, messages=_MESSAGES) as stream:
            async for _ in stream:
                pass


def _gemini_client(base_url: str, sdk: Any) -> Any:
    # No retries (a warm-up call that failed is skipped), and no CA bundle loaded for the
    # simulator's plain HTTP: `ssl: False` stands in for google-genai's own context.
    options = sdk.types.HttpOptions(
        base_url=base_url, client_args={"verify": False}, async_client_args={"ssl": False}
    )
    return sdk.Client(api_key="warm-up", http_options=options)


def _gemini(base_url: str, sdk: Any) -> None:
    client = _gemini_client(base_url, sdk)
    with contextlib.closing(client):
        for _ in client.models.generate_content_stream(model="warm", contents="warm up"):
            pass
        client.models.generate_content(model="warm", contents="warm up")


async def _gemini_async(base_url: str, sdk: Any) -> None:
    # google-genai's async calls go through aiohttp (installed with this package).
    client = _gemini_client(base_url, sdk)
    try:
        stream = await client.aio.models.generate_content_stream(model="warm", contents="warm up")
        async for _ in stream:
            pass
        await client.aio.models.generate_content(model="warm", contents="warm up")
    finally:
        await client.aio.aclose()
        client.close()


_SyncPaths = Callable[[str, Any], None]
_AsyncPaths = Callable[[str, Any], Coroutine[Any, Any, None]]
_PATHS: dict[str, tuple[_SyncPaths, _AsyncPaths]] = {
    "openai": (_openai, _openai_async),
    "anthropic": (_anthropic, _anthropic_async),
    "google.genai": (_gemini, _gemini_async),
}


def _on_own_loop(paths: _AsyncPaths, base_url: str, sdk: Any) -> None:
    """Run the async paths on a loop and thread of their own: warming is asked for from inside
    a running loop too (an async fixture's setup), where asyncio.run refuses to nest."""

    def run() -> None:
        # An SDK version without one of these paths: warm what ran.
        with contextlib.suppress(Exception):
            asyncio.run(paths(base_url, sdk))

    thread = threading.Thread(target=run, name="pytest-latency-warm-up", daemon=True)
    thread.start()
    thread.join()


def warm(provider: str) -> None:
    """Run `provider`'s SDK paths once in this process, sync and async (no-op after the first
    time, and for an SDK that is not installed). Best effort: a path an SDK version lacks is
    skipped."""
    if provider in _WARMED or provider not in _PATHS:
        return
    with _LOCK:
        if provider in _WARMED:
            return
        _WARMED.add(provider)
        try:
            sdk = importlib.import_module(provider)
        except ImportError:
            return
        from pytest_latency.attribution import set_sink
        from pytest_latency.sim import LatencyModel, SimServer

        sync_paths, async_paths = _PATHS[provider]
        # No sink while warming: under --latency-capture=auto these calls would otherwise be
        # recorded as the current test's setup calls.
        previous = set_sink(None)
        try:
            with SimServer(LatencyModel.preset("instant").replace(output_tokens=4), port=0) as sim:
                with contextlib.suppress(Exception):  # as in _on_own_loop
                    sync_paths(sim.base_url, sdk)
                _on_own_loop(async_paths, sim.base_url, sdk)
        finally:
            set_sink(previous)
        # The price table too: the first look or report that prices calls would load it.
        from pytest_latency.pricing import warm as warm_prices

        with contextlib.suppress(Exception):
            warm_prices()


def warmed() -> int:
    """How many SDKs this process has warmed (the gc freeze re-freezes when it grows)."""
    return len(_WARMED)


def warm_imported() -> None:
    """Warm every SDK this process has imported: a measured test's module (or its conftest)
    imported it to build its own clients, for `instrument()` or `--latency-capture=auto`."""
    import sys

    for provider in _PATHS:
        if provider in sys.modules:
            warm(provider)


__all__ = ["warm", "warm_imported", "warmed"]
