"""The layout's import directions hold: docs/design.md ("Layout and import directions") states which
folder may import which, and this test reads that table and holds every import of the installed
tree to it (module-level, in functions and under TYPE_CHECKING alike), so a new import against it
fails here, naming the file, the import and the rule. It also refuses any pyspark import under
connector/ and any import cycle between modules.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SECTION = "## Layout and import directions"
# Third-party packages the Kafka side never imports: it runs without Spark.
SPARK_PACKAGES = ("pyspark", "py4j")


@dataclass(frozen=True)
class Rules:
    allowed: dict[str, frozenset[str]]   # unit -> the units it may import

    @property
    def units(self) -> list[str]:
        return sorted(self.allowed, key=len, reverse=True)

    def unit_of(self, rel: str) -> str | None:
        """The table's row for a repo-relative file: its own row (a file), else its deepest
        folder's."""
        if rel in self.allowed:
            return rel
        return next((u for u in self.units if u.endswith("/") and rel.startswith(u)), None)


def read_rules(design: str) -> Rules:
    """The table of docs/design.md's layout section: first cell the folder (or file), last cell
    what it may import (backticked folders, or "nothing")."""
    _, found, rest = design.partition(SECTION + "\n")
    assert found, f"docs/design.md has no section {SECTION!r}"
    rest = rest.split("\n## ", 1)[0]
    allowed: dict[str, frozenset[str]] = {}
    for line in rest.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2 or set(cells[0]) <= {"-", " "}:
            continue
        unit = re.findall(r"`([^`]+)`", cells[0])
        if len(unit) != 1:
            continue  # the header row
        targets = re.findall(r"`([^`]+)`", cells[-1])
        assert targets or cells[-1] == "nothing", f"design.md's row for {unit[0]}: {cells[-1]!r}"
        allowed[unit[0]] = frozenset(targets)
    return Rules(allowed)


def package_dirs(pyproject: dict) -> dict[str, str]:
    """Dotted package -> folder, as pyproject.toml installs them."""
    return dict(pyproject["tool"]["setuptools"]["package-dir"])


def product_files(root: Path, dirs: dict[str, str], modules: list[str]) -> list[str]:
    files = {str(p.relative_to(root)) for d in set(dirs.values())
             for p in (root / d).rglob("*.py") if "__pycache__" not in p.parts}
    return sorted(files | {f"{m}.py" for m in modules})


def module_name(rel: str, dirs: dict[str, str]) -> str:
    for pkg, folder in sorted(dirs.items(), key=lambda kv: -len(kv[1])):
        if rel.startswith(folder + "/"):
            parts = [pkg, *rel[len(folder) + 1:-3].split("/")]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return rel[:-3]


def file_of(name: str, root: Path, dirs: dict[str, str], modules: list[str]) -> str | None:
    """The repo-relative file of a dotted module of the tree, or None."""
    if name in modules:
        return f"{name}.py"
    for pkg, folder in sorted(dirs.items(), key=lambda kv: -len(kv[0])):
        if name == pkg or name.startswith(pkg + "."):
            base = "/".join([folder, *name[len(pkg) + 1:].split(".")]) if name != pkg else folder
            for rel in (f"{base}.py", f"{base}/__init__.py"):
                if (root / rel).is_file():
                    return rel
            return None
    return None


@dataclass(frozen=True)
class Import:
    source: str      # repo-relative file
    line: int
    text: str        # as written
    target: str      # dotted module


def imports_of(rel: str, root: Path, dirs: dict[str, str], modules: list[str]) -> list[Import]:
    """Every import of a file, relative ones resolved; ``from pkg import mod`` names the module."""
    tree = ast.parse((root / rel).read_text(), rel)
    me = module_name(rel, dirs)
    package = me if rel.endswith("__init__.py") else me.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out.append(Import(rel, node.lineno, f"import {a.name}", a.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            text = f"from {'.' * node.level}{node.module or ''} import"
            for a in node.names:
                sub = f"{mod}.{a.name}"
                target = sub if file_of(sub, root, dirs, modules) else mod
                out.append(Import(rel, node.lineno, f"{text} {a.name}", target))
    return out


def violations(root: Path, rules: Rules, dirs: dict[str, str], modules: list[str]) -> list[str]:
    problems = []
    files = product_files(root, dirs, modules)
    for rel in files:   # every package must have its own row: a new one is a decision
        if rel.endswith("/__init__.py") and rel[: -len("__init__.py")] not in rules.allowed:
            problems.append(f"{rel[:-len('__init__.py')]} is a package without a row in "
                            f"docs/design.md's {SECTION[3:]!r} table")
    graph: dict[str, set[str]] = {rel: set() for rel in files}
    for rel in files:
        unit = rules.unit_of(rel)
        if unit is None:
            problems.append(f"{rel} lies in no folder of docs/design.md's table")
            continue
        for imp in imports_of(rel, root, dirs, modules):
            top = imp.target.split(".")[0]
            where = f"{rel}:{imp.line}: `{imp.text}`"
            if top in SPARK_PACKAGES and unit.startswith("connector/"):
                problems.append(f"{where} imports {top} under connector/, which runs without "
                                "Spark (docs/design.md: connector/ never imports pyspark)")
                continue
            if not any(imp.target == p or imp.target.startswith(p + ".")
                       for p in [*dirs, *modules]):
                continue  # the standard library or a third-party package
            target = file_of(imp.target, root, dirs, modules)
            if target is None:
                problems.append(f"{where} names {imp.target}, which is no module of the tree")
                continue
            graph[rel].add(target)
            to = rules.unit_of(target)
            if to != unit and to not in rules.allowed[unit]:
                may = ", ".join(sorted(rules.allowed[unit]))
                may = f"only {may}" if may else "nothing of txkafka"
                problems.append(f"{where} imports {to} ({imp.target}), but {unit} may import "
                                f"{may} (docs/design.md, {SECTION[3:]})")
    problems += [f"import cycle: {' -> '.join(c)}" for c in cycles(graph)]
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a closed path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp) + [sorted(comp)[0]])

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def table_cycles(rules: Rules) -> list[list[str]]:
    return cycles({u: set(t) for u, t in rules.allowed.items()})


def _tree() -> tuple[Rules, dict[str, str], list[str]]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    rules = read_rules((REPO / "docs" / "design.md").read_text())
    return rules, package_dirs(pyproject), list(pyproject["tool"]["setuptools"]["py-modules"])


def test_every_import_follows_the_layouts_directions():
    rules, dirs, modules = _tree()
    problems = violations(REPO, rules, dirs, modules)
    assert not problems, "\n".join(problems)


def test_the_stated_directions_have_no_way_back():
    """Folders that may import each other, directly or round about, would be one component."""
    rules, _, _ = _tree()
    for unit, targets in rules.allowed.items():
        assert not targets - set(rules.allowed), f"{unit} may import unknown folders {targets}"
    assert not table_cycles(rules), table_cycles(rules)


RULES = """# Design
## Layout and import directions

| folder | may import |
|---|---|
| `connector/` | nothing |
| `connector/client/` | `connector/` |
| `connector/sink/` | `connector/`, `connector/client/` |
| `txkafka/__init__.py` | nothing |
| `txkafka/` | `connector/`, `connector/client/`, `connector/sink/`, `txkafka/__init__.py` |

## Next
"""


@pytest.mark.parametrize("path, text, expected", [
    ("connector/client/producer.py", "from ..sink.options import delivery_timeout_ms\n",
     "connector/client/producer.py:1: `from ..sink.options import delivery_timeout_ms` imports "
     "connector/sink/ (txkafka.connector.sink.options), but connector/client/ may import only "
     "connector/"),
    ("connector/sink/options.py", "def f():\n    import pyspark.sql\n",
     "connector/sink/options.py:2: `import pyspark.sql` imports pyspark under connector/"),
    ("connector/sink/options.py", "from txkafka.connector.no_such_module import X\n",
     "names txkafka.connector.no_such_module, which is no module of the tree"),
    ("connector/sink/options.py", "from .. import errors\nfrom txkafka import FORMAT_NAME\n",
     "connector/sink/options.py:2: `from txkafka import FORMAT_NAME` imports txkafka/__init__.py"),
    ("connector/errors.py", "from .sink import options\n",
     "`from .sink import options` imports connector/sink/ (txkafka.connector.sink.options), but "
     "connector/ may import nothing of txkafka"),
    ("connector/client/cycle.py", "from . import producer\n",
     "import cycle: connector/client/cycle.py -> connector/client/producer.py -> "
     "connector/client/cycle.py"),
    ("connector/extra/__init__.py", "",
     "connector/extra/ is a package without a row"),
])
def test_the_check_names_the_file_the_import_and_the_rule(tmp_path, path, text, expected):
    """The check fails on each kind of breach, on a small tree of its own."""
    files = {"connector/__init__.py": "", "connector/errors.py": "",
             "connector/client/__init__.py": "", "connector/client/producer.py": "",
             "connector/sink/__init__.py": "", "connector/sink/options.py": "",
             "txkafka/__init__.py": "FORMAT_NAME = 'txkafka'\n"}
    if path == "connector/client/cycle.py":
        files["connector/client/producer.py"] = "from .cycle import x\n"
    files[path] = text
    for rel, body in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    dirs = {"txkafka": "txkafka", "txkafka.connector": "connector"}
    rules = read_rules(RULES)
    problems = violations(tmp_path, rules, dirs, [])
    assert any(expected in p for p in problems), problems


def test_a_clean_small_tree_passes(tmp_path):
    for rel, body in {"connector/__init__.py": "", "connector/errors.py": "",
                      "connector/client/__init__.py": "",
                      "connector/client/producer.py": "from ..errors import E\nimport json\n",
                      "connector/sink/__init__.py": "",
                      "connector/sink/options.py": "from ..client import producer\n",
                      "txkafka/__init__.py": ""}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    assert violations(tmp_path, read_rules(RULES), {"txkafka": "txkafka",
                                                    "txkafka.connector": "connector"}, []) == []
