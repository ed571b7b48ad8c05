"""The reference docs keep up with the tree: every module has its line in design.md, and every
relative link of the docs points at a file that exists (results moved out of docs/benchmarks/
must not leave dead links behind)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]


def test_design_names_every_module():
    """Each module by its path, each package by its folder (the layout table's row)."""
    design = (REPO / "docs" / "design.md").read_text()
    modules = [p for folder in ("connector", "python_datasource", "txkafka")
               for p in sorted((REPO / folder).rglob("*.py")) if p.name != "__init__.py"]
    modules.append(REPO / "pyspark_txkafka.py")
    missing = [str(p.relative_to(REPO)) for p in modules
               if f"`{p.relative_to(REPO)}`" not in design]
    packages = [p.parent for folder in ("connector", "python_datasource", "txkafka")
                for p in sorted((REPO / folder).rglob("__init__.py"))]
    missing += [f"{p.relative_to(REPO)}/" for p in packages
                if f"`{p.relative_to(REPO)}/`" not in design]
    assert not missing, f"docs/design.md's module table lacks {missing}"


def test_relative_links_resolve():
    dead = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" in target:
                continue
            if not (doc.parent / target).exists():
                dead.append(f"{doc.relative_to(REPO)} -> {target}")
    assert not dead, dead


def test_benchmark_page_stays_a_reference_page():
    assert len((REPO / "docs" / "benchmarks.md").read_text().splitlines()) <= 200
