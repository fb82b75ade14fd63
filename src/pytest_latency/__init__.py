"""pytest-latency: LLM latency as pytest assertions.

The public API: what the docs teach and nothing else (tests/test_public_api.py holds `__all__`
to it). Importing the package is cheap: pytest imports the plugin in every session of an
environment where it is installed, so nothing heavy (SDKs, jinja2, aiohttp, asyncio, the
dataclass-heavy record modules) is imported here; each name loads its module on first use
(PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_latency.budgets import BudgetError, Expectation, parse_expectation
    from pytest_latency.calls import Call, ManualValue
    from pytest_latency.capture import (
        aiohttp_middleware,
        instrument,
        instrument_http_client,
        wrap_transport,
    )
    from pytest_latency.metrics import CallMetrics
    from pytest_latency.recording import LatencyRecorder

__all__ = [
    "BudgetError",
    "Call",
    "CallMetrics",
    "Expectation",
    "LatencyRecorder",
    "ManualValue",
    "__version__",
    "aiohttp_middleware",
    "instrument",
    "instrument_http_client",
    "parse_expectation",
    "wrap_transport",
]

__version__ = "0.1.0.dev0"

# Each public name and the module that owns it.
_OWNERS = {
    "BudgetError": "budgets",
    "Expectation": "budgets",
    "parse_expectation": "budgets",
    "Call": "calls",
    "ManualValue": "calls",
    "CallMetrics": "metrics",
    "LatencyRecorder": "recording",
    "aiohttp_middleware": "capture",
    "instrument": "capture",
    "instrument_http_client": "capture",
    "wrap_transport": "capture",
}


def __getattr__(name: str) -> Any:
    owner = _OWNERS.get(name)
    if owner is None:
        raise AttributeError(f"module 'pytest_latency' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"pytest_latency.{owner}"), name)
