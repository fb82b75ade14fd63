"""The pytest plugin: options, the `latency` marker, fixtures, sampling, verdicts, the summary.

The only module that imports pytest, and nothing imports it. Per-test state lives in
`item.stash`, run-wide state in `config.stash`. Each test's measurements travel on its call-phase
report as the plain-data attribute `pytest_latency`, which pytest-xdist forwards to the controller
unchanged, so one code path aggregates local and distributed runs. Heavy modules (the SDKs,
aiohttp through `sim`) are imported only by the fixtures that need them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_latency import attribution, capture
from pytest_latency.aggregate import Judgement, TestSummary, judge, summarise
from pytest_latency.budgets import BudgetError, Expectation, parse_expectation
from pytest_latency.recording import LatencyRecorder, Recording

if TYPE_CHECKING:
    from pytest_latency.sim import SimServer

# ---- help texts, shared by options and ini keys -------------------------------------------------

CAPTURE_DESC = (
    "Which HTTP requests to capture: 'fixtures' (the plugin's clients and instrument()ed ones) "
    "or 'auto' (every httpx2/httpx request a test makes, by patching the default transports)"
)
SIM_DESC = (
    "Start the built-in simulated LLM endpoint and point the client fixtures at it; "
    "the value is a latency-model preset (default: 'default')"
)
ANTHROPIC_URL_DESC = "Base URL for the anthropic_client fixtures (beats ANTHROPIC_BASE_URL)"
OPENAI_URL_DESC = "Base URL for the openai_client fixtures (beats OPENAI_BASE_URL)"
MARKER_DESC = (
    "latency(*expectations, samples=1, warmup=0): judge the LLM calls of this test against "
    "budget expressions such as 'ttft.p95 < 400ms'; run the body warmup + samples times"
)

_CAPTURE_CHOICES = ("fixtures", "auto")


# ---- state --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    capture: str
    sim_preset: str | None
    anthropic_base_url: str | None
    openai_base_url: str | None


@dataclass(frozen=True, slots=True)
class SamplingPlan:
    expectations: tuple[Expectation, ...]
    samples: int
    warmup: int


@dataclass(slots=True)
class RunState:
    """Controller-side collection of every test's data, in arrival order (xdist interleaves)."""

    summaries: list[TestSummary] = field(default_factory=list)
    session_recording: Recording = field(default_factory=lambda: Recording("<session>"))
    uninstall_auto_capture: Any = None
    sim: SimServer | None = None


SETTINGS_KEY = pytest.StashKey[Settings]()
RUN_KEY = pytest.StashKey[RunState]()
PLAN_KEY = pytest.StashKey[SamplingPlan]()
RECORDING_KEY = pytest.StashKey[Recording]()
JUDGEMENTS_KEY = pytest.StashKey[list[Judgement]]()

REPORT_ATTRIBUTE = "pytest_latency"
COLLECTOR_NAME = "latency-collector"


# ---- options and configuration ------------------------------------------------------------------


def _capture_mode(value: str) -> str:
    if value not in _CAPTURE_CHOICES:
        import argparse

        raise argparse.ArgumentTypeError(
            f"{value!r} is not a capture mode; choose from {', '.join(_CAPTURE_CHOICES)}"
        )
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("latency", "pytest-latency")
    group.addoption(
        "--latency-capture", dest="latency_capture", type=_capture_mode, help=CAPTURE_DESC
    )
    group.addoption(
        "--latency-sim",
        dest="latency_sim",
        nargs="?",
        const="default",
        default=None,
        metavar="PRESET",
        help=SIM_DESC,
    )
    group.addoption(
        "--latency-anthropic-base-url", dest="latency_anthropic_base_url", help=ANTHROPIC_URL_DESC
    )
    group.addoption(
        "--latency-openai-base-url", dest="latency_openai_base_url", help=OPENAI_URL_DESC
    )
    parser.addini("latency_capture", CAPTURE_DESC, default="fixtures")
    parser.addini("latency_sim", SIM_DESC, default="")
    parser.addini("latency_anthropic_base_url", ANTHROPIC_URL_DESC, default="")
    parser.addini("latency_openai_base_url", OPENAI_URL_DESC, default="")


def _setting(config: pytest.Config, name: str) -> str | None:
    """CLI beats ini; an empty ini value means unset."""
    value = config.getoption(name, default=None)
    if value is None:
        value = config.getini(name) or None
    return str(value) if value is not None else None


def _read_settings(config: pytest.Config) -> Settings:
    capture_mode = _setting(config, "latency_capture") or "fixtures"
    if capture_mode not in _CAPTURE_CHOICES:
        raise pytest.UsageError(
            f"latency_capture = {capture_mode!r} in the ini file is not a capture mode; "
            f"choose from {', '.join(_CAPTURE_CHOICES)}"
        )
    return Settings(
        capture=capture_mode,
        sim_preset=_setting(config, "latency_sim"),
        anthropic_base_url=_setting(config, "latency_anthropic_base_url"),
        openai_base_url=_setting(config, "latency_openai_base_url"),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_DESC)
    settings = _read_settings(config)
    config.stash[SETTINGS_KEY] = settings
    if settings.sim_preset is not None:
        from pytest_latency.sim import LatencyModel, SimSettingsError

        try:
            LatencyModel.preset(settings.sim_preset)
        except SimSettingsError as exc:
            raise pytest.UsageError(f"--latency-sim: {exc}") from None
    run = RunState()
    config.stash[RUN_KEY] = run
    # Calls made outside any test (session fixtures, collection) are kept, never dropped.
    attribution.set_fallback(run.session_recording.sink)
    if settings.capture == "auto":
        run.uninstall_auto_capture = capture.install_auto_capture()
    if not _is_worker(config):
        config.pluginmanager.register(LatencyCollector(run), COLLECTOR_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(RUN_KEY, None)
    attribution.set_fallback(None)
    collector = config.pluginmanager.get_plugin(COLLECTOR_NAME)
    if collector is not None:
        config.pluginmanager.unregister(collector)
    if run is None:
        return
    if run.uninstall_auto_capture is not None:
        run.uninstall_auto_capture()
    if run.sim is not None:
        run.sim.stop()
        run.sim = None


def pytest_report_header(config: pytest.Config) -> str | None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return None
    target = f"simulator ({settings.sim_preset})" if settings.sim_preset else "as configured"
    return f"latency: capture={settings.capture}, endpoint={target}"


# ---- collection: markers are validated here so a bad one names its test -------------------------


def _plan_for(item: pytest.Item) -> SamplingPlan | None:
    markers = list(item.iter_markers("latency"))
    if not markers:
        return None
    expectations: list[Expectation] = []
    samples: int | None = None
    warmup: int | None = None
    source = f"{item.nodeid} @pytest.mark.latency"
    # Closest marker first: its sampling wins; expectations from every level add up.
    for marker in markers:
        unknown = set(marker.kwargs) - {"samples", "warmup"}
        if unknown:
            raise BudgetError(
                f"{source}: unknown keyword argument(s) {', '.join(sorted(unknown))}; "
                "valid: samples, warmup"
            )
        for arg in marker.args:
            expectations.append(parse_expectation(arg, source=source))
        if samples is None and "samples" in marker.kwargs:
            samples = _count(marker.kwargs["samples"], "samples", 1, source)
        if warmup is None and "warmup" in marker.kwargs:
            warmup = _count(marker.kwargs["warmup"], "warmup", 0, source)
    return SamplingPlan(tuple(expectations), samples or 1, warmup or 0)


def _count(value: object, name: str, minimum: int, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BudgetError(f"{source}: {name}={value!r} must be an integer >= {minimum}")
    return value


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    report = yield
    if not report.passed:
        return report
    problems: list[str] = []
    for node in report.result:
        if not isinstance(node, pytest.Item):
            continue
        try:
            plan = _plan_for(node)
        except BudgetError as exc:
            problems.append(str(exc))
            continue
        if plan is not None:
            node.stash[PLAN_KEY] = plan
    if problems:
        report.outcome = "failed"
        report.longrepr = "\n".join(["pytest-latency: invalid latency marker", *problems])
        report.result = []
    return report


# ---- running a test: attribution, samples, verdict ----------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    recording = Recording(item.nodeid)
    item.stash[RECORDING_KEY] = recording
    with attribution.routing_to(recording.sink):
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    recording = pyfuncitem.stash.get(RECORDING_KEY, None)
    if recording is None:
        return None
    plan = pyfuncitem.stash.get(PLAN_KEY, None)
    runs = [True] * (plan.warmup if plan else 0) + [False] * (plan.samples if plan else 1)
    # Every other implementation (pytest's own, pytest-asyncio's, anyio's) runs once per sample;
    # fixtures stay set up across samples, like pytest-benchmark's rounds.
    this_plugin = pyfuncitem.config.pluginmanager.get_plugin("latency") or sys.modules[__name__]
    call_body = pyfuncitem.config.pluginmanager.subset_hook_caller(
        "pytest_pyfunc_call", remove_plugins=[this_plugin]
    )
    for warmup in runs:
        recording.begin_sample(warmup=warmup)
        try:
            call_body(pyfuncitem=pyfuncitem)
        finally:
            recording.end_sample()
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when != "call":
        return report
    recording = item.stash.get(RECORDING_KEY, None)
    if recording is None:
        return report
    plan = item.stash.get(PLAN_KEY, None)
    data = recording.to_data()
    judgements: list[Judgement] = []
    if plan is not None and plan.expectations:
        judgements = judge(plan.expectations, data)
        data["budgets"] = [j.to_dict() for j in judgements]
        if report.passed:
            _fail_on_misses(report, judgements, data)
    item.stash[JUDGEMENTS_KEY] = judgements
    if data["calls"] or data["manual"] or plan is not None:
        setattr(report, REPORT_ATTRIBUTE, data)
    return report


def _fail_on_misses(
    report: pytest.TestReport, judgements: list[Judgement], data: dict[str, Any]
) -> None:
    if not data["calls"] and not data["manual"]:
        report.outcome = "failed"
        report.longrepr = (
            "pytest-latency: this test has latency budgets but made no captured LLM call.\n"
            "Is the client instrumented? Use the anthropic_client/openai_client fixtures, "
            "wrap your own client with pytest_latency.instrument(client), or run with "
            "--latency-capture=auto."
        )
        return
    misses = [j for j in judgements if j.verdict == "fail"]
    if misses:
        report.outcome = "failed"
        report.longrepr = "\n".join(
            ["pytest-latency: latency budget missed", *(f"  {j.message}" for j in misses)]
        )


# ---- controller side: collect, summarise -------------------------------------------------------


class LatencyCollector:
    """Controller-only plugin object (pytest's junitxml LogXML shape): gathers every test's data
    from its report, local or forwarded by pytest-xdist, in whatever order reports arrive."""

    def __init__(self, run: RunState) -> None:
        self._run = run

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, REPORT_ATTRIBUTE, None)
        if data is None or report.when != "call":
            return
        self._run.summaries.append(summarise(data, outcome=report.outcome))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self._run.summaries:
            return
        from pytest_latency.terminal import summary_lines

        terminalreporter.write_sep("=", "latency summary")
        for line in summary_lines(self._run.summaries):
            terminalreporter.write_line(line)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


# ---- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def latency(request: pytest.FixtureRequest) -> LatencyRecorder:
    """The current test's latency recorder.

    ``latency.calls`` lists the LLM calls captured so far (warmup excluded) with their metrics,
    ``latency.record("ttft", 0.35)`` records a value measured by hand (seconds by default), and
    ``with latency.sample():`` marks one sample in a test that loops by itself.
    """
    recording = request.node.stash.get(RECORDING_KEY, None)
    if recording is None:  # the fixture used outside a test's protocol (e.g. by a plugin)
        recording = Recording(request.node.nodeid)
        request.node.stash[RECORDING_KEY] = recording
    return LatencyRecorder(recording)


def _sim_server(config: pytest.Config) -> SimServer:
    run = config.stash[RUN_KEY]
    if run.sim is None:
        from pytest_latency.sim import LatencyModel, SimServer

        preset = config.stash[SETTINGS_KEY].sim_preset or "default"
        run.sim = SimServer(LatencyModel.preset(preset))
        run.sim.start()
    return run.sim


@dataclass(frozen=True, slots=True)
class _Endpoint:
    base_url: str | None
    api_key: str | None


def _endpoint(config: pytest.Config, provider: str) -> _Endpoint:
    settings = config.stash[SETTINGS_KEY]
    env_key = os.environ.get(f"{provider.upper()}_API_KEY")
    if settings.sim_preset is not None:
        sim = _sim_server(config)
        url = sim.anthropic_base_url if provider == "anthropic" else sim.openai_base_url
        return _Endpoint(url, env_key or "sim-key")
    explicit = settings.anthropic_base_url if provider == "anthropic" else settings.openai_base_url
    # None lets the SDK read <PROVIDER>_BASE_URL from the environment itself.
    return _Endpoint(explicit, env_key)


_SDK_CLASSES = {
    ("anthropic", False): "Anthropic",
    ("anthropic", True): "AsyncAnthropic",
    ("openai", False): "OpenAI",
    ("openai", True): "AsyncOpenAI",
}


def _sdk_client(request: pytest.FixtureRequest, provider: str, *, is_async: bool) -> Any:
    sdk = pytest.importorskip(provider, reason=f"this fixture needs the `{provider}` package")
    endpoint = _endpoint(request.config, provider)
    client_class = getattr(sdk, _SDK_CLASSES[provider, is_async])
    return capture.instrument(client_class(base_url=endpoint.base_url, api_key=endpoint.api_key))


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


@pytest.fixture
def latency_http_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An instrumented ``httpx2.Client`` for self-hosted endpoints (vLLM, llama.cpp, SGLang,
    Ollama); its base URL is the OpenAI base URL in effect (simulator, CLI/ini, OPENAI_BASE_URL)."""
    import httpx2

    base_url = _endpoint(request.config, "openai").base_url or os.environ.get("OPENAI_BASE_URL")
    client = capture.instrument(httpx2.Client(base_url=base_url or "", timeout=600))
    yield client
    client.close()


@pytest.fixture
def latency_async_http_client(request: pytest.FixtureRequest) -> Any:
    """An instrumented ``httpx2.AsyncClient``; see ``latency_http_client``."""
    import httpx2

    base_url = _endpoint(request.config, "openai").base_url or os.environ.get("OPENAI_BASE_URL")
    return capture.instrument(httpx2.AsyncClient(base_url=base_url or "", timeout=600))


@pytest.fixture
def llm_sim(request: pytest.FixtureRequest) -> Iterator[SimServer]:
    """The built-in simulated LLM endpoint (one per process, started on first use).

    Yields the server: ``.anthropic_base_url``, ``.openai_base_url``, ``.set_model(...)`` to change
    the latency model for this test (restored afterwards) and ``.truth()``, the ground-truth log of
    what it sent and when, cleared at the start of each test.
    """
    sim = _sim_server(request.config)
    original = sim.model
    sim.clear_truth()
    yield sim
    sim.set_model(original)
