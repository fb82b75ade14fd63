"""The frameworks teams call LLMs through, one way of calling each: shared by
tests/test_frameworks.py (bounds that hold on a busy machine) and benchmarks/bench_accuracy.py
(the strict accuracy targets), so both measure the same calls.

Each scenario takes the simulator's base URL, `wrap` (`capture.instrument` bound to a sink, or None
under auto-capture) and a number of calls, and makes that many streamed calls through the real
package (the `frameworks` extra pins them); docs/frameworks.md gives each recipe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2
import litellm
from pydantic import SecretStr

from pytest_latency import capture
from pytest_latency.wire import WireRecord

PROMPT = "Count to twelve."
MESSAGES = [{"role": "user", "content": PROMPT}]
OPENAI_MODEL = "gpt-4o-mini"
ANTHROPIC_MODEL = "claude-haiku-4-5"
GEMINI_MODEL = "gemini-2.5-flash"
KEY = SecretStr("k")  # LangChain's models take their key as one


Wrap = Callable[[Any], Any] | None


def _langchain_openai(base: str, wrap: Wrap, calls: int) -> None:
    from langchain_openai import ChatOpenAI

    clients: dict[str, Any] = {}
    if wrap is not None:  # ChatOpenAI takes the HTTP clients its openai clients run on
        clients = {"http_client": wrap(httpx2.Client()), "http_async_client": httpx2.AsyncClient()}
    llm = ChatOpenAI(
        model=OPENAI_MODEL, base_url=f"{base}/v1", api_key=KEY, stream_usage=True, **clients
    )
    for _ in range(calls):
        for _ in llm.stream(PROMPT):
            pass


def _langchain_openai_async(base: str, wrap: Wrap, calls: int) -> None:
    from langchain_openai import ChatOpenAI

    async def run() -> None:
        clients: dict[str, Any] = {}
        if wrap is not None:
            clients = {
                "http_client": httpx2.Client(),
                "http_async_client": wrap(httpx2.AsyncClient()),
            }
        llm = ChatOpenAI(
            model=OPENAI_MODEL, base_url=f"{base}/v1", api_key=KEY, stream_usage=True, **clients
        )
        for _ in range(calls):
            async for _ in llm.astream(PROMPT):
                pass

    asyncio.run(run())


def _langchain_anthropic(base: str, wrap: Wrap, calls: int) -> None:
    from langchain_anthropic import ChatAnthropic

    llm = ChatAnthropic(
        model_name=ANTHROPIC_MODEL, base_url=base, api_key=KEY, timeout=None, stop=None
    )
    if wrap is not None:  # no client parameter: instrument the one it built (a cached property)
        wrap(llm._client)
    for _ in range(calls):
        for _ in llm.stream(PROMPT):
            pass


def _litellm_openai(base: str, client: Any) -> dict[str, Any]:
    """A streamed call's arguments on litellm's openai provider, through `client` if not None
    (the provider takes the SDK client to call through)."""
    extra = {} if client is None else {"client": client}
    return {
        "model": f"openai/{OPENAI_MODEL}",
        "api_base": f"{base}/v1",
        "api_key": "k",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }


def _litellm(base: str, wrap: Wrap, calls: int) -> None:
    import openai

    client = None if wrap is None else wrap(openai.OpenAI(base_url=f"{base}/v1", api_key="k"))
    for _ in range(calls):
        stream = litellm.completion(**_litellm_openai(base, client))
        for _ in stream:
            pass


def _litellm_async(base: str, wrap: Wrap, calls: int) -> None:
    """litellm's async default is its aiohttp transport (under auto-capture, the aiohttp binding
    records it); with a client of our own, the openai SDK's httpx2."""
    import openai

    async def run() -> None:
        client = None
        if wrap is not None:
            client = wrap(openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="k"))
        for _ in range(calls):
            stream = await litellm.acompletion(**_litellm_openai(base, client))
            async for _ in stream:
                pass

    asyncio.run(run())


def _litellm_anthropic_async(base: str, wrap: Wrap, calls: int) -> None:

    async def run() -> None:
        for _ in range(calls):
            stream = await litellm.acompletion(
                model=f"anthropic/{ANTHROPIC_MODEL}",
                api_base=base,
                api_key="k",
                messages=MESSAGES,
                stream=True,
            )
            async for _ in stream:
                pass

    asyncio.run(run())


def _pydantic_ai_agent(client: Any, model: Any, calls: int) -> None:
    """`calls` streamed runs of a pydantic-ai agent on `model`, then `client` closed."""
    from pydantic_ai import Agent

    async def run() -> None:
        agent = Agent(model)
        for _ in range(calls):
            async with agent.run_stream(PROMPT) as result:
                async for _ in result.stream_text():
                    pass
        await client.close()

    asyncio.run(run())


def _pydantic_ai(base: str, wrap: Wrap, calls: int) -> None:
    import openai
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="k")
    if wrap is not None:
        wrap(client)
    _pydantic_ai_agent(
        client, OpenAIChatModel(OPENAI_MODEL, provider=OpenAIProvider(openai_client=client)), calls
    )


def _pydantic_ai_anthropic(base: str, wrap: Wrap, calls: int) -> None:
    import anthropic
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    client = anthropic.AsyncAnthropic(base_url=base, api_key="k")
    if wrap is not None:
        wrap(client)
    _pydantic_ai_agent(
        client,
        AnthropicModel(ANTHROPIC_MODEL, provider=AnthropicProvider(anthropic_client=client)),
        calls,
    )


def _openai_agents_run(base: str, wrap: Wrap, calls: int, responses: bool) -> None:
    """`calls` streamed runs of an Agents SDK agent on Chat Completions or on Responses."""
    import openai
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)  # its exporter would post traces to OpenAI

    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="k")
        if wrap is not None:
            wrap(client)
        model_cls = OpenAIResponsesModel if responses else OpenAIChatCompletionsModel
        agent = Agent(
            name="counter",
            instructions="Be brief.",
            model=model_cls(model=OPENAI_MODEL, openai_client=client),
            # Chat Completions streams carry usage only when asked (stream_options); Responses
            # streams always do.
            model_settings=ModelSettings(include_usage=True),
        )
        for _ in range(calls):
            result = Runner.run_streamed(agent, PROMPT)
            async for _ in result.stream_events():
                pass
        await client.close()

    asyncio.run(run())


def _openai_agents(base: str, wrap: Wrap, calls: int) -> None:
    _openai_agents_run(base, wrap, calls, responses=False)


def _openai_agents_responses(base: str, wrap: Wrap, calls: int) -> None:
    _openai_agents_run(base, wrap, calls, responses=True)


def _google_genai(base: str, wrap: Wrap, calls: int) -> None:
    """Sync calls: google-genai's httpx2 client (the one it builds, instrumented in place)."""
    from google import genai
    from google.genai import types

    with genai.Client(api_key="k", http_options=types.HttpOptions(base_url=base)) as client:
        if wrap is not None:
            wrap(client)
        for _ in range(calls):
            for _ in client.models.generate_content_stream(model=GEMINI_MODEL, contents=PROMPT):
                pass


def _google_genai_async(base: str, wrap: Wrap, calls: int, own_httpx: bool = False) -> None:
    """Async calls: on the aiohttp session google-genai makes for the loop (its default when
    aiohttp is installed), or on an httpx2 client handed to it (`own_httpx`), which turns it away
    from aiohttp. `wrap` is given the client's `.aio` side."""
    import httpx2
    from google import genai
    from google.genai import types

    http = httpx2.AsyncClient(timeout=None) if own_httpx else None
    options = types.HttpOptions(base_url=base, httpx_async_client=http)
    client = genai.Client(api_key="k", http_options=options)
    if wrap is not None:
        wrap(client.aio)

    async def run() -> None:
        for _ in range(calls):
            stream = await client.aio.models.generate_content_stream(
                model=GEMINI_MODEL, contents=PROMPT
            )
            async for _ in stream:
                pass
        await client.aio.aclose()
        if http is not None:  # google-genai leaves a client it was given open
            await http.aclose()

    asyncio.run(run())
    client.close()


def _google_genai_async_httpx(base: str, wrap: Wrap, calls: int) -> None:
    _google_genai_async(base, wrap, calls, own_httpx=True)


@dataclass(frozen=True)
class Scenario:
    run: Callable[[str, Wrap, int], None]
    api: str
    instrumentable: bool = True  # the framework takes (or exposes) a client to instrument


SCENARIOS: dict[str, Scenario] = {
    "langchain-openai": Scenario(_langchain_openai, "openai.chat"),
    "langchain-openai async": Scenario(_langchain_openai_async, "openai.chat"),
    "langchain-anthropic": Scenario(_langchain_anthropic, "anthropic.messages"),
    "litellm": Scenario(_litellm, "openai.chat"),
    "litellm async": Scenario(_litellm_async, "openai.chat"),
    # litellm's anthropic provider builds its own aiohttp-backed client: auto-capture only.
    "litellm anthropic async": Scenario(
        _litellm_anthropic_async, "anthropic.messages", instrumentable=False
    ),
    "pydantic-ai": Scenario(_pydantic_ai, "openai.chat"),
    "pydantic-ai anthropic": Scenario(_pydantic_ai_anthropic, "anthropic.messages"),
    "openai-agents": Scenario(_openai_agents, "openai.chat"),
    "openai-agents responses": Scenario(_openai_agents_responses, "openai.responses"),
    "google-genai": Scenario(_google_genai, "gemini.generate_content"),
    "google-genai async": Scenario(_google_genai_async, "gemini.generate_content"),
    "google-genai async httpx2": Scenario(_google_genai_async_httpx, "gemini.generate_content"),
}
MODES = ("auto", "instrument")


def modes(scenario: Scenario) -> tuple[str, ...]:
    return MODES if scenario.instrumentable else ("auto",)


def record_calls(
    scenario: Scenario, base: str, mode: str, calls: int, *, read_ahead: bool = False
) -> list[WireRecord]:
    """`calls` calls of `scenario` against the simulator at `base`, captured as `mode` says:
    under auto-capture (what `--latency-capture=auto` installs) or through `capture.instrument`,
    reading ahead (`--latency-read-ahead`) if asked."""
    records: list[WireRecord] = []
    if mode == "auto":
        uninstall = capture.install_auto_capture(sink=records.append, read_ahead=read_ahead)
        try:
            scenario.run(base, None, calls)
        finally:
            uninstall()
    else:

        def wrap(client: Any) -> Any:
            return capture.instrument(client, sink=records.append, read_ahead=read_ahead)

        scenario.run(base, wrap, calls)
    return records
