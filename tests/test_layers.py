"""The import direction of DESIGN's architecture, enforced: each module imports only what its
docstring says it may (package modules and third-party libraries alike)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "pytest_latency"

# module → package modules it may import (transitively allowed ones need not be listed twice).
ALLOWED: dict[str, set[str]] = {
    "plugin": {"*"},
    "cli": {"sim", "aggregate", "budgets", "histogram", "catalogue", "stats", "results", "report"},
    "report": {"results", "histogram", "report"},
    "results": {
        "aggregate",
        "budgets",
        "diagnose",
        "histogram",
        "stats",
        "catalogue",
        "metrics",
        "recording",
    },
    "terminal": {"aggregate"},
    "diagnose": {"aggregate", "budgets", "stats", "recording", "metrics", "catalogue"},
    "aggregate": {"budgets", "stats", "recording", "metrics", "catalogue", "policies"},
    "policies": set(),
    "recording": {"metrics", "wire", "catalogue"},
    "budgets": {"catalogue"},
    "stats": set(),
    "metrics": {"wire", "catalogue", "metrics"},
    "capture": {"wire", "attribution"},
    "attribution": {"wire"},
    "histogram": set(),
    "catalogue": set(),
    "wire": set(),
    "sim": {"sim"},
    "__init__": {"capture"},
}
THIRD_PARTY: dict[str, set[str]] = {
    "pytest": {"plugin"},
    "hdrh": set(),  # the histogram module owns the V2 codec; hdrh is its test oracle only
    "jinja2": {"report"},
    "aiohttp": {"sim"},
    "httpx2": {"plugin", "capture"},
    "httpx": {"capture"},
    "pytest_asyncio": {"plugin"},  # optional: async client fixtures close in the test's loop
    "anthropic": {"plugin"},
    "openai": {"plugin"},
    "tomli": {"budgets"},  # tomllib's backport for Python 3.10
}


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def _owner(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return parts[0]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "pytest_latency":
                names.update(f"pytest_latency.{alias.name}" for alias in node.names)
            else:
                names.add(node.module)
    return names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_module_imports_follow_the_architecture(path: Path) -> None:
    owner = _owner(path)
    assert owner in ALLOWED, f"{owner}: new module, add it to the architecture table"
    allowed = ALLOWED[owner]
    for name in _imports(path):
        top = name.split(".")[0]
        if top == "pytest_latency":
            parts = name.split(".")
            if len(parts) == 1:
                continue
            target = parts[1]
            if target.startswith("__"):  # package metadata such as __version__
                continue
            assert "*" in allowed or target in allowed or target == owner, (
                f"{path.relative_to(SRC)} imports {name}; {owner} may import {sorted(allowed)}"
            )
        elif top in THIRD_PARTY:
            assert owner in THIRD_PARTY[top], (
                f"{path.relative_to(SRC)} imports {top}; only {sorted(THIRD_PARTY[top])} may"
            )
        else:
            assert top in sys.stdlib_module_names or top == "__future__", (
                f"{path.relative_to(SRC)} imports undeclared third-party module {top}"
            )


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_every_module_says_what_it_owns(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert doc and len(doc) > 40, f"{path.relative_to(SRC)} needs a module docstring"


def test_importing_the_plugin_stays_cheap() -> None:
    code = (
        "import sys, pytest_latency.plugin; "
        "heavy = {'anthropic', 'openai', 'jinja2', 'hdrh', 'aiohttp', 'httpx', 'httpx2', "
        "'pytest_latency.aggregate', 'pytest_latency.budgets', 'pytest_latency.metrics', "
        "'pytest_latency.diagnose', 'pytest_latency.capture', 'pytest_latency.sim', "
        "'pytest_latency.results', "
        # dataclass-heavy (~1 ms each to define): loaded with the first call, not with pytest
        "'pytest_latency.recording', 'pytest_latency.catalogue', 'pytest_latency.wire'"
        "} & set(sys.modules); "
        "print(sorted(heavy))"
    )
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]", f"importing the plugin pulled in {out}"
