"""The fixtures: the `latency` recorder, instrumented SDK and HTTP clients, and `llm_sim`.

Owns how clients are configured (simulator, CLI/ini base URLs, the SDKs' own environment
variables), how each SDK's HTTP traffic is instrumented (anthropic and openai through the httpx2
client they hold, google-genai through its `HttpOptions`) and their lifetimes. SDKs, httpx2 and
the simulator are imported only when a fixture that needs them is requested, so an unused plugin
costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

import pytest

from pytest_latency.plugin._state import RUN_KEY, SETTINGS_KEY

if TYPE_CHECKING:
    from pytest_latency.attribution import Sink
    from pytest_latency.recording import LatencyRecorder
    from pytest_latency.sim import SimServer


@pytest.fixture
def latency(request: pytest.FixtureRequest) -> LatencyRecorder:
    """The current test's latency recorder.

    ``latency.calls`` lists the LLM calls captured so far (warmup excluded) with their metrics,
    ``latency.record("ttft", 0.35)`` records a value measured by hand (seconds by default), and
    ``with latency.sample():`` marks one sample in a test that loops by itself.
    """
    from pytest_latency.plugin._warm import warm_imported
    from pytest_latency.recording import LatencyRecorder, Recording

    warm_imported()  # clients the test builds itself: their SDK's first-use work, unmeasured
    router = request.config.stash[RUN_KEY].router
    recording = router.current() if router.nodeid == request.node.nodeid else None
    # Outside the test's own run (a plugin asking for the fixture) it records, unreported.
    return LatencyRecorder(recording or Recording(request.node.nodeid))


def sim_server(config: pytest.Config) -> SimServer:
    """The per-process simulator, started on first use and stopped at unconfigure."""
    run = config.stash[RUN_KEY]
    if run.sim is None:
        from pytest_latency.sim import LatencyModel, SimServer

        preset = config.stash[SETTINGS_KEY].sim_preset or "default"
        run.sim = SimServer(LatencyModel.preset(preset))
        run.sim.start()
        if run.audit is not None:  # the simulator is an LLM endpoint the audit watches
            run.audit.add_endpoint(run.sim.anthropic_base_url)
    return run.sim


def _instrument(client: Any, *, read_ahead: bool) -> Any:
    # capture (and through it asyncio) loads when a client is first requested, not with the
    # plugin; so does the recording the router makes on a test's first call: imported there, it
    # was 17 ms inside the first measured call of a process whose test asked for no `latency`.
    import pytest_latency.recording  # noqa: F401
    from pytest_latency.capture import instrument

    return instrument(client, read_ahead=read_ahead)


class _Endpoint(NamedTuple):  # not a dataclass: see the Settings class in `_state`
    base_url: str | None
    api_key: str | None
    # The provider's own API and nothing to authenticate with: what is missing, for the
    # fixture's error.
    missing_key: str | None = None


# The API key a client sends to a configured server when the environment has none: self-hosted
# servers (vLLM, llama.cpp, SGLang, Ollama) accept any key or none, but both SDKs refuse to build
# or send a request without one. Documented in docs/self-hosted.md.
PLACEHOLDER_API_KEY = "pytest-latency-no-key"


class _Provider(NamedTuple):
    """Where a provider's SDK looks for its key and server, and the provider's own API."""

    key_env: tuple[str, ...]  # the first one set is the key (google-genai: GOOGLE_API_KEY first)
    url_env: str
    host: str  # its own API, where a made-up key could only be refused


_PROVIDERS = {
    "anthropic": _Provider(("ANTHROPIC_API_KEY",), "ANTHROPIC_BASE_URL", "api.anthropic.com"),
    "openai": _Provider(("OPENAI_API_KEY",), "OPENAI_BASE_URL", "api.openai.com"),
    "gemini": _Provider(
        ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
        "GOOGLE_GEMINI_BASE_URL",
        "generativelanguage.googleapis.com",
    ),
}


def _env(name: str) -> str | None:
    return os.environ.get(name) or None  # an empty variable is an unset one


def _explicit_url(config: pytest.Config, provider: str) -> str | None:
    settings = config.stash[SETTINGS_KEY]
    if provider == "anthropic":
        return settings.anthropic_base_url
    return settings.gemini_base_url if provider == "gemini" else settings.openai_base_url


def _sim_url(sim: SimServer, provider: str) -> str:
    if provider == "anthropic":
        return sim.anthropic_base_url
    return sim.gemini_base_url if provider == "gemini" else sim.openai_base_url


def _endpoint(config: pytest.Config, provider: str) -> _Endpoint:
    settings = config.stash[SETTINGS_KEY]
    known = _PROVIDERS[provider]
    env_key = next((key for key in map(_env, known.key_env) if key), None)
    explicit = _explicit_url(config, provider)
    url = explicit or _env(known.url_env)
    configured = bool(env_key or url)
    if settings.sim_preset is not None and not (settings.sim_auto and configured):
        return _Endpoint(_sim_url(sim_server(config), provider), env_key or "sim-key")
    # anthropic also authenticates with a bearer token of its own.
    if env_key or (provider == "anthropic" and _env("ANTHROPIC_AUTH_TOKEN")):
        # None lets the SDK read the key and its base URL variable from the environment itself.
        return _Endpoint(explicit, env_key)
    if url is None or urlsplit(url).hostname == known.host:
        keys = " or ".join(known.key_env)
        missing = (
            f"no API key: set {keys} for the {provider} API, or point the fixture at a server "
            f"with --latency-{provider}-base-url or {known.url_env} (a self-hosted one needs no "
            "key), or at the simulator with --latency-sim"
        )
        return _Endpoint(explicit, None, missing)
    return _Endpoint(explicit, PLACEHOLDER_API_KEY)


_SDK_CLASSES = {
    ("anthropic", False): "Anthropic",
    ("anthropic", True): "AsyncAnthropic",
    ("openai", False): "OpenAI",
    ("openai", True): "AsyncOpenAI",
}


def _ready_endpoint(request: pytest.FixtureRequest, provider: str, sdk: str) -> _Endpoint:
    """The SDK's first-use work done (here rather than inside the first measured call) and
    where its client goes; a missing key fails the fixture."""
    from pytest_latency.plugin._warm import warm

    warm(sdk)
    endpoint = _endpoint(request.config, provider)
    if endpoint.missing_key is not None:
        # Said now, in one line, rather than by the SDK: openai refuses at setup, anthropic only
        # at the first call, deep in a traceback.
        pytest.fail(f"{request.fixturename}: {endpoint.missing_key}", pytrace=False)
    return endpoint


def _sdk_client(request: pytest.FixtureRequest, provider: str, *, is_async: bool) -> Any:
    sdk = pytest.importorskip(provider, reason=f"this fixture needs the `{provider}` package")
    endpoint = _ready_endpoint(request, provider, provider)
    client_class = getattr(sdk, _SDK_CLASSES[provider, is_async])
    client = client_class(base_url=endpoint.base_url, api_key=endpoint.api_key)
    return _instrument(client, read_ahead=_read_ahead(request.config))


def _read_ahead(config: pytest.Config) -> bool:
    return config.stash[SETTINGS_KEY].read_ahead


@pytest.fixture
def anthropic_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An instrumented ``anthropic.Anthropic``; every call it makes is measured for this test.

    Configured like the SDK (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL), overridden by
    ``--latency-anthropic-base-url`` or pointed at the simulator by ``--latency-sim``.
    """
    client = _sdk_client(request, "anthropic", is_async=False)
    yield client
    client.close()


@pytest.fixture
def openai_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An instrumented ``openai.OpenAI``; every call it makes is measured for this test.

    Configured like the SDK (OPENAI_API_KEY, OPENAI_BASE_URL), overridden by
    ``--latency-openai-base-url`` or pointed at the simulator by ``--latency-sim``.
    """
    client = _sdk_client(request, "openai", is_async=False)
    yield client
    client.close()


def gemini_client_for(
    base_url: str | None,
    api_key: str | None,
    *,
    sink: Sink | None = None,
    read_ahead: bool = False,
) -> tuple[Any, Any]:
    """A ``google.genai.Client`` every request of which is captured, and the httpx2 client it
    sends its sync calls through (google-genai leaves a client it was given open: close it).

    Through google-genai's public `HttpOptions`: its sync calls go through the instrumented
    `httpx_client`; its async ones through the aiohttp sessions it makes per event loop (the
    default whenever aiohttp is installed, as it is with this package), each request carrying
    capture's middleware (`async_client_args={"middlewares": ...}`, which google-genai passes to
    `ClientSession.request`). `sink` None: the plugin's routing to the running test."""
    import httpx2
    from google import genai
    from google.genai import types

    import pytest_latency.recording  # noqa: F401 (see `_instrument`)
    from pytest_latency.capture import aiohttp_middleware, instrument

    routed: dict[str, Any] = {} if sink is None else {"sink": sink}
    # As google-genai's own sync client: no timeout of its own (each request says its own),
    # redirects followed.
    http = instrument(
        httpx2.Client(timeout=None, follow_redirects=True), read_ahead=read_ahead, **routed
    )
    options = types.HttpOptions(
        base_url=base_url,
        httpx_client=http,
        async_client_args={"middlewares": (aiohttp_middleware(**routed),)},
    )
    return genai.Client(api_key=api_key, http_options=options), http


def _gemini_client(request: pytest.FixtureRequest) -> Any:
    pytest.importorskip("google.genai", reason="this fixture needs the `google-genai` package")
    endpoint = _ready_endpoint(request, "gemini", "google.genai")
    client, http = gemini_client_for(
        endpoint.base_url, endpoint.api_key, read_ahead=_read_ahead(request.config)
    )
    request.addfinalizer(http.close)
    return client


@pytest.fixture
def gemini_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An instrumented ``google.genai.Client``; every call it makes, sync (``.models``) and
    async (``.aio.models``, on google-genai's aiohttp sessions), is measured for this test.

    Configured like the SDK (GOOGLE_API_KEY or GEMINI_API_KEY, GOOGLE_GEMINI_BASE_URL),
    overridden by ``--latency-gemini-base-url`` or pointed at the simulator by ``--latency-sim``.
    The Gemini API only: a Vertex AI client needs its own credentials (build it and use
    ``--latency-capture=auto``).
    """
    client = _gemini_client(request)
    yield client
    client.close()


def _async_client(request: pytest.FixtureRequest, provider: str) -> Any:
    if provider == "gemini":
        return _gemini_client(request).aio
    return _sdk_client(request, provider, is_async=True)


async def _aclose(client: Any) -> None:
    # google-genai's AsyncClient closes with aclose(), the Stainless SDKs' with close().
    close = getattr(client, "aclose", None) or client.close
    await close()


def _async_client_fixture(provider: str, doc: str) -> Any:
    """An async client fixture that closes its client inside the test's own event loop.

    With pytest-asyncio installed (strict or auto mode) it is a ``pytest_asyncio`` fixture on the
    function loop, so the client's connections close before that loop does; without it, a plain
    fixture hands the client out and closing is left to the test (or to other async runners).
    """
    name = f"async_{provider}_client"
    try:
        import pytest_asyncio
    except ImportError:

        def plain(request: pytest.FixtureRequest) -> Any:
            return _async_client(request, provider)

        plain.__doc__ = doc
        return pytest.fixture(plain, name=name)

    async def closing(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
        client = _async_client(request, provider)
        yield client
        await _aclose(client)

    closing.__doc__ = doc
    return pytest_asyncio.fixture(closing, loop_scope="function", name=name)


async_anthropic_client = _async_client_fixture(
    "anthropic",
    """An instrumented ``anthropic.AsyncAnthropic`` for async tests; every call it makes is
    measured for this test. Configured like ``anthropic_client``.""",
)

async_openai_client = _async_client_fixture(
    "openai",
    """An instrumented ``openai.AsyncOpenAI`` for async tests; every call it makes is measured
    for this test. Configured like ``openai_client``.""",
)


async_gemini_client = _async_client_fixture(
    "gemini",
    """An instrumented ``google.genai`` async client (``Client(...).aio``) for async tests;
    every call it makes is measured for this test. Configured like ``gemini_client``; closed in
    the test's event loop, where its aiohttp session lives.""",
)


def _http_base_url(config: pytest.Config) -> str:
    return _endpoint(config, "openai").base_url or os.environ.get("OPENAI_BASE_URL") or ""


@pytest.fixture
def latency_http_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An instrumented ``httpx2.Client`` for self-hosted endpoints (vLLM, llama.cpp, SGLang,
    Ollama); its base URL is the OpenAI base URL in effect (simulator, CLI/ini, OPENAI_BASE_URL)."""
    import httpx2

    client = _instrument(
        httpx2.Client(base_url=_http_base_url(request.config), timeout=600),
        read_ahead=_read_ahead(request.config),
    )
    yield client
    client.close()


@pytest.fixture
def latency_async_http_client(request: pytest.FixtureRequest) -> Any:
    """An instrumented ``httpx2.AsyncClient``; see ``latency_http_client``. Close it with
    ``await client.aclose()`` in the test (its connections belong to the test's loop)."""
    import httpx2

    return _instrument(
        httpx2.AsyncClient(base_url=_http_base_url(request.config), timeout=600),
        read_ahead=_read_ahead(request.config),
    )


@pytest.fixture
def llm_sim(request: pytest.FixtureRequest) -> Iterator[SimServer]:
    """The built-in simulated LLM endpoint (one per process, started on first use).

    Yields the server: ``.anthropic_base_url``, ``.openai_base_url``, ``.set_model(...)`` to change
    the latency model for this test (restored afterwards) and ``.truth()``, the ground-truth log of
    what it sent and when, cleared at the start of each test.
    """
    sim = sim_server(request.config)
    original = sim.model
    sim.clear_truth()
    yield sim
    sim.set_model(original)
