"""Shared setup for the example suite.

Clients come from pytest-latency's fixtures (`anthropic_client`, `openai_client` and their async
twins), which point at the built-in simulator unless a provider is configured (see pytest.ini).
Model names come from the environment so the same suite runs against real providers.
"""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "agent: an agent loop (budgeted by marker in budgets.toml)")


@pytest.fixture
def claude_model() -> str:
    return os.environ.get("EXAMPLES_ANTHROPIC_MODEL", "claude-haiku-4-5")


@pytest.fixture
def openai_model() -> str:
    return os.environ.get("EXAMPLES_OPENAI_MODEL", "gpt-4.1-mini")
