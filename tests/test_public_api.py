"""The public API: `pytest_latency.__all__` names what the docs teach, every name resolves, and
importing the package stays cheap (each name loads its module on first use)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_latency

ROOT = Path(__file__).resolve().parents[1]


def test_all_is_sorted_and_every_name_resolves() -> None:
    names = [n for n in pytest_latency.__all__ if n != "__version__"]
    assert names == sorted(names)
    for name in names:
        value = getattr(pytest_latency, name)
        assert getattr(value, "__name__", name) == name
    with pytest.raises(AttributeError, match="no attribute 'kept_calls'"):
        pytest_latency.kept_calls  # noqa: B018  (old internal names are not API)


def test_the_names_the_docs_teach_are_public() -> None:
    taught: set[str] = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        taught.update(re.findall(r"pytest_latency\.([A-Za-z_]\w*)\(", text))
        for names in re.findall(r"from pytest_latency import ([\w, ]+)", text):
            taught.update(n.strip() for n in names.split(","))
    # Subpackages the docs import by name are modules, not re-exported names.
    modules = {"diagnose", "sim"}
    assert taught - modules <= set(pytest_latency.__all__), taught - set(pytest_latency.__all__)
    assert {"instrument", "CallMetrics", "LatencyRecorder", "BudgetError"} <= set(
        pytest_latency.__all__
    )


def test_importing_the_package_loads_none_of_it() -> None:
    code = (
        "import sys, pytest_latency; "
        "print(sorted(m for m in sys.modules if m.startswith('pytest_latency.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"
