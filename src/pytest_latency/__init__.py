"""pytest-latency: LLM latency as pytest assertions.

The public API. Importing the package is cheap: pytest imports the plugin in every session of an
environment where it is installed, so nothing heavy (SDKs, jinja2, hdrh, aiohttp) is imported here.
"""

from __future__ import annotations

from pytest_latency.capture import instrument, wrap_transport

__all__ = ["__version__", "instrument", "wrap_transport"]

__version__ = "0.1.0.dev0"
