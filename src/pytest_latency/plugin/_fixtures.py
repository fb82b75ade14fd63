"""The fixtures: the `latency` recorder, instrumented SDK and HTTP clients, and `llm_sim`.

Owns how clients are configured (simulator, CLI/ini base URLs, the SDKs' own environment
variables) and their lifetimes. SDKs, httpx2 and the simulator are imported only when a fixture
that needs them is requested, so an unused plugin costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

import pytest

from pytest_latency.plugin._state import RUN_KEY, SETTINGS_KEY

if TYPE_CHECKING:
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

# The providers' own APIs, where a made-up key could only be refused.
_PROVIDER_HOSTS = {"anthropic": "api.anthropic.com", "openai": "api.openai.com"}


def _env(name: str) -> str | None:
    return os.environ.get(name) or None  # an empty variable is an unset one


def _endpoint(config: pytest.Config, provider: str) -> _Endpoint:
    settings = config.stash[SETTINGS_KEY]
    prefix = provider.upper()
    env_key = _env(f"{prefix}_API_KEY")
    explicit = settings.anthropic_base_url if provider == "anthropic" else settings.openai_base_url
    url = explicit or _env(f"{prefix}_BASE_URL")
    configured = bool(env_key or url)
    if settings.sim_preset is not None and not (settings.sim_auto and configured):
        sim = sim_server(config)
        sim_url = sim.anthropic_base_url if provider == "anthropic" else sim.openai_base_url
        return _Endpoint(sim_url, env_key or "sim-key")
    # anthropic also authenticates with a bearer token of its own.
    if env_key or (provider == "anthropic" and _env("ANTHROPIC_AUTH_TOKEN")):
        # None lets the SDK read the key and <PROVIDER>_BASE_URL from the environment itself.
        return _Endpoint(explicit, env_key)
    if url is None or urlsplit(url).hostname == _PROVIDER_HOSTS[provider]:
        missing = (
            f"no API key: set {prefix}_API_KEY for the {provider} API, or point the fixture at "
            f"a server with --latency-{provider}-base-url or {prefix}_BASE_URL (a self-hosted "
            f"one needs no key), or at the simulator with --latency-sim"
        )
        return _Endpoint(explicit, None, missing)
    return _Endpoint(explicit, PLACEHOLDER_API_KEY)


_SDK_CLASSES = {
    ("anthropic", False): "Anthropic",
    ("anthropic", True): "AsyncAnthropic",
    ("openai", False): "OpenAI",
    ("openai", True): "AsyncOpenAI",
}


def _sdk_client(request: pytest.FixtureRequest, provider: str, *, is_async: bool) -> Any:
    sdk = pytest.importorskip(provider, reason=f"this fixture needs the `{provider}` package")
    from pytest_latency.plugin._warm import warm

    warm(provider)  # the SDK's first-use work, here rather than inside the first measured call
    endpoint = _endpoint(request.config, provider)
    if endpoint.missing_key is not None:
        # Said now, in one line, rather than by the SDK: openai refuses at setup, anthropic only
        # at the first call, deep in a traceback.
        pytest.fail(f"{request.fixturename}: {endpoint.missing_key}", pytrace=False)
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
            return _sdk_client(request, provider, is_async=True)

        plain.__doc__ = doc
        return pytest.fixture(plain, name=name)

    async def closing(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
        client = _sdk_client(request, provider, is_async=True)
        yield client
        await client.close()

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
