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
"""

from __future__ import annotations

import os

import httpcore  # noqa: F401
import httpcore2  # noqa: F401

import pytest_latency.audit  # noqa: F401

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
