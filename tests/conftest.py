"""Test-session setup shared by every test module: only what must happen before any test runs.

pytester's in-process runs unload every module first imported during the run. httpx2 and httpx
import their connection library (httpcore2, httpcore) lazily and cache its exception classes on
first use. A connection library first loaded inside an inner run would leave that cache pointing
at unloaded classes for the rest of the session, and a refused connection would then surface as
httpcore2.ConnectError instead of httpx2.ConnectError, depending on test order. Loading both here
puts them in every snapshot pytester takes.

The plugin itself is loaded by each inner run, and unloaded after it, except for what a test
module imported: the package object keeps its submodule attributes, so the next run's `from
pytest_latency import audit` finds the unloaded audit module while `import` of a binding
re-imports `attribution`; the two then read different `CAPTURING` marks and every captured
connection of the second run looked like one that bypassed capture. Loading `audit` (and with it
`attribution`) here keeps one of each.

litellm fetches its model price map from GitHub when first imported, unless told not to (three
attempts, then its bundled copy); this machine, like many CI runners, has no route there, so the
suite tells it before any test module imports it.

The inner runs (pytester's, in process and in subprocesses and their xdist workers) block the
third-party pytest plugins none of them uses: every inner process imported them at its start,
langsmith's (a langchain dependency) 1.4 s and hypothesis's 1.4 s of a trivial run's 5.4 s here
(session 23). pytester clears PYTEST_ADDOPTS when it is set up, so this sets it after.
"""

from __future__ import annotations

import os

import httpcore  # noqa: F401
import httpcore2  # noqa: F401
import pytest

import pytest_latency.audit  # noqa: F401

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The entry-point names of the plugins the inner runs block (see the module docstring).
INNER_BLOCKED = ("langsmith_plugin", "hypothesispytest")


@pytest.fixture(autouse=True)
def _lean_inner_runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "pytester" not in request.fixturenames:
        return
    request.getfixturevalue("pytester")  # it clears PYTEST_ADDOPTS: set it after
    blocked = " ".join(f"-p no:{name}" for name in INNER_BLOCKED)
    monkeypatch.setenv(
        "PYTEST_ADDOPTS", f"{os.environ.get('PYTEST_ADDOPTS', '')} {blocked}".strip()
    )
