"""The in-process simulator as a test module's tests share it: `server`, one per module, serving
the module's `BASE` model; `sim`, that server as each test should find it (`BASE` again, no
truth, an empty prompt cache). A module takes them with `pytest_plugins = ["sim_fixtures"]`; a
module that defines its own `server` or `sim` keeps its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_latency.sim import LatencyModel, SimServer


def _base(request: pytest.FixtureRequest) -> LatencyModel:
    base = getattr(request.module, "BASE", None)
    if not isinstance(base, LatencyModel):
        raise TypeError(f"{request.module.__name__} needs a BASE LatencyModel for its simulator")
    return base


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest) -> Iterator[SimServer]:
    with SimServer(_base(request)) as s:
        yield s


@pytest.fixture
def sim(server: SimServer, request: pytest.FixtureRequest) -> SimServer:
    server.set_model(_base(request))
    server.clear_truth()
    server.reset_cache()
    return server
