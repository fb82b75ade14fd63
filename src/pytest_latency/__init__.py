"""pytest-latency: LLM latency as pytest assertions.

The public API. Importing the package is cheap: pytest imports the plugin in every session of an
environment where it is installed, so nothing heavy (SDKs, jinja2, hdrh, aiohttp, asyncio) is
imported here; `instrument` and `wrap_transport` load `capture` on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_latency.capture import instrument, wrap_transport

__all__ = ["__version__", "instrument", "wrap_transport"]

__version__ = "0.1.0.dev0"


def __getattr__(name: str) -> Any:
    if name in ("instrument", "wrap_transport"):
        import importlib

        return getattr(importlib.import_module("pytest_latency.capture"), name)
    raise AttributeError(f"module 'pytest_latency' has no attribute {name!r}")
