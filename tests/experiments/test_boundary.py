"""The product never imports research code: no module of moe/, common/, apps/ or an app package
imports ``experiments`` or ``benchmarks`` (deleting either must not break the product)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("moe", "common", "apps", "olfaction", "retrieval", "generation3d", "vision", "streaming")
RESEARCH = ("experiments", "benchmarks")


def research_imports(source: str) -> list[str]:
    """Top-level names of ``experiments``/``benchmarks`` imports in ``source`` (absolute imports)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [name for name in names if name.split(".")[0] in RESEARCH]
    return found


def test_detector_sees_every_import_form():
    src = "import experiments.olfaction\nfrom benchmarks import moe_dispatch\nimport numpy\nfrom . import x\n"
    assert research_imports(src) == ["experiments.olfaction", "benchmarks"]


@pytest.mark.parametrize("package", PRODUCT)
def test_product_package_does_not_import_research_code(package):
    offenders = {
        str(path.relative_to(ROOT)): names
        for path in sorted((ROOT / package).rglob("*.py"))
        if (names := research_imports(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}
