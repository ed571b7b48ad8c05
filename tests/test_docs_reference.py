"""The reference docs keep up with the tree: every module has its line in design.md, every
relative link of the docs points at a file (and heading) that exists, the user guide's option
tables list exactly the options the code accepts in four short columns, troubleshooting.md
describes every exception class the connector and the command line define, with its bases, every
flag a page shows for a `txkafka` command is one that command takes, and each row of design.md's
failure matrix names tests that exist."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

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


def test_readme_links_every_doc_page():
    readme = (REPO / "README.md").read_text()
    missing = [p.name for p in sorted((REPO / "docs").glob("*.md"))
               if f"](docs/{p.name}" not in readme]
    assert not missing, f"README.md's documentation list lacks {missing}"


def test_benchmark_page_stays_a_reference_page():
    assert len((REPO / "docs" / "benchmarks.md").read_text().splitlines()) <= 200


def test_every_result_folder_is_linked_from_the_docs():
    """A result folder nothing links to is history, which git keeps: it goes, not piles up."""
    text = "".join(p.read_text() for p in DOCS)
    unlinked = [d.name for d in sorted((REPO / "docs" / "benchmarks").iterdir())
                if d.is_dir() and f"benchmarks/{d.name}/" not in text]
    assert not unlinked, f"docs/benchmarks/ folders no page links to: {unlinked}"


# ---- the user guide: option tables that agree with the code ---------------------------------

GUIDES = sorted((REPO / "docs").glob("user-guide*.md"))
OPTION_COLUMNS = ["option", "values", "default", "meaning"]


def _cells(line: str) -> list[str]:
    """A table row's cells: split on '|' outside code spans, unless escaped."""
    cells, cell, code = [], "", False
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cell += "|"
            i += 2
            continue
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += ch
        i += 1
    cells.append(cell.strip())
    return cells


def _outside_fences(lines: list[str]) -> list[bool]:
    """For each line of a Markdown page: True when it is outside fenced code (a fence's own
    ``` line counts as inside)."""
    out, in_fence = [], False
    for line in lines:
        fence = line.lstrip().startswith("```")
        if fence:
            in_fence = not in_fence
        out.append(not in_fence and not fence)
    return out


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every table of a Markdown page: (header cells, body rows' cells)."""
    lines, out, i = text.splitlines(), [], 0
    prose = _outside_fences(lines)
    while i < len(lines):
        is_table = (prose[i] and lines[i].lstrip().startswith("|") and i + 1 < len(lines)
                    and re.fullmatch(r"\s*\|?(\s*:?-{3,}:?\s*\|)+\s*:?-*:?\s*\|?\s*", lines[i + 1]))
        if not is_table:
            i += 1
            continue
        header, rows, i = _cells(lines[i]), [], i + 2
        while i < len(lines) and lines[i].lstrip().startswith("|"):
            rows.append(_cells(lines[i]))
            i += 1
        out.append((header, rows))
    return out


def _option_tables(guide: Path) -> list[tuple[list[str], list[list[str]]]]:
    return [t for t in _tables(guide.read_text()) if t[0] and t[0][0].lower() == "option"]


def test_option_tables_have_the_four_columns():
    wrong = [f"{g.name}: {header}" for g in GUIDES for header, rows in _option_tables(g)
             if [h.lower() for h in header] != OPTION_COLUMNS
             or any(len(r) != len(OPTION_COLUMNS) for r in rows)]
    assert not wrong, f"option tables need the columns {' | '.join(OPTION_COLUMNS)}: {wrong}"


def _documented(guide: str) -> set[str]:
    """Option names in the first column of a guide's option tables."""
    names: set[str] = set()
    for _, rows in _option_tables(REPO / "docs" / guide):
        for row in rows:
            names.update(re.findall(r"`([^`\s]+)`", row[0]))
    return names


@pytest.mark.parametrize("guide, side", [("user-guide-reader.md", "reader"),
                                         ("user-guide-writer.md", "writer")])
def test_the_option_tables_list_every_option_the_code_accepts_and_no_other(guide, side):
    from txkafka.connector.option_names import IGNORE_UNKNOWN_OPTIONS, READER, WRITER

    space = READER if side == "reader" else WRITER
    documented = _documented(guide)
    expected = {*space.options, IGNORE_UNKNOWN_OPTIONS, "kafka.bootstrap.servers"}
    missing = expected - documented
    extra = {n for n in documented - expected if not n.lower().startswith("kafka.")}
    assert not missing and not extra, (f"{guide}: options the code accepts but the tables lack: "
                                       f"{sorted(missing)}; documented but not accepted: "
                                       f"{sorted(extra)}")


# ---- troubleshooting: every typed error the connector raises --------------------------------

def _exception_classes(*folders: Path) -> set[str]:
    """Public classes under ``folders`` that derive from an exception (by name, across files)."""
    bases: dict[str, list[str]] = {}
    for path in (p for folder in folders for p in folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                                    for b in node.bases]

    def is_exception(name: str, seen: frozenset = frozenset()) -> bool:
        builtin = getattr(builtins, name, None)
        if isinstance(builtin, type) and issubclass(builtin, BaseException):
            return True
        return name in bases and name not in seen and any(
            is_exception(b, seen | {name}) for b in bases[name])

    return {n for n in bases if not n.startswith("_") and is_exception(n)}


def test_troubleshooting_lists_every_public_exception_of_the_connector():
    page = (REPO / "docs" / "troubleshooting.md").read_text()
    # txkafka/: the command line's own errors, which its users meet too
    classes = _exception_classes(*(REPO / f for f in ("connector", "python_datasource", "txkafka")))
    assert {"DataLossError", "TransactionLostError", "CheckpointError"} <= classes  # it scans
    missing = sorted(c for c in classes if f"`{c}`" not in page)
    assert not missing, f"docs/troubleshooting.md does not describe {missing}"


# ---- links into a page go to a heading it has ------------------------------------------------

def _anchors(doc: Path) -> set[str]:
    """GitHub's heading anchors of a page."""
    out = set()
    lines = doc.read_text().splitlines()
    for line, prose in zip(lines, _outside_fences(lines)):
        if not prose:
            continue
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
        out.update(re.findall(r'<a id="([\w-]+)"></a>', line))  # the glossary's terms
    return out


def test_relative_links_to_headings_resolve():
    dead = []
    for doc in DOCS:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", doc.read_text()):
            if "://" in target:
                continue
            page = (doc.parent / target) if target else doc
            if page.suffix == ".md" and page.exists() and anchor not in _anchors(page):
                dead.append(f"{doc.relative_to(REPO)} -> {target}#{anchor}")
    assert not dead, dead


def test_the_error_table_names_each_class_s_bases():
    """troubleshooting.md's table "error | derives from | raised" gives each class's bases as the
    code declares them (a caller's ``except`` depends on them)."""
    from txkafka.connector import errors
    from txkafka.connector.client.record_batch_encoder import RecordTooLargeError
    from txkafka.connector.fault_injection import InjectedFault

    page = (REPO / "docs" / "troubleshooting.md").read_text()
    table = next(rows for header, rows in _tables(page) if header[:2] == ["error", "derives from"])
    classes = {**{n: getattr(errors, n) for n in dir(errors)},
               "RecordTooLargeError": RecordTooLargeError, "InjectedFault": InjectedFault}
    wrong = []
    for row in table:
        name = row[0].strip("`")
        bases = [b.__name__ for b in classes[name].__bases__]
        documented = re.findall(r"`(\w+)`", row[1])
        if documented != bases:
            wrong.append(f"{name}: the page says {documented}, the code {bases}")
    assert len(table) >= 20 and not wrong, wrong


# ---- command lines: every flag the docs show is one the command takes ------------------------

def _command_lines(text: str) -> list[tuple[int, str]]:
    """Each ``txkafka ...`` command (in a code block or a code span) with its line number; a
    shell line continued by a trailing backslash is one command."""
    out = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line, n = lines[i], i + 1
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i].strip()
        line = line.replace("\\|", "|")  # a table cell's escaped bar
        for m in re.finditer(r"(?:^|[\s`(;|&$])txkafka((?: +[^`#\n;&>)]+)?)", line):
            out.append((n, re.split(r"\s\|", m.group(1))[0]))  # a shell pipe ends it, a|b not
        i += 1
    return out


def _unknown_flags(root, words: list[str], commands: bool = False) -> list[str]:
    """Flags of ``words`` (a command line after ``txkafka``) that the command they follow does not
    take; ``a|b`` names alternatives, each checked; ``...`` or a placeholder ends the check.
    ``commands``: a command word the parser does not have is one too (for lines known to be code)."""
    import argparse

    def children(parser):
        return next((a.choices for a in parser._actions
                     if isinstance(a, argparse._SubParsersAction)), {})

    def flags(parser):
        return {s for a in parser._actions for s in a.option_strings}

    parsers, path, bad = [root], ["txkafka"], []
    for word in words:
        word = word.strip("[]()\"',.:")
        subs = [children(p) for p in parsers]
        names = word.split("|")
        if all(subs) and all(any(n in s for s in subs) for n in names):
            parsers = [s[n] for s in subs for n in names if n in s]
            path.append(word)
        elif all(subs) and not word.startswith("-"):
            if commands and re.fullmatch(r"[a-z][\w|-]*", word):
                bad.append(f"{' '.join(path)} {word}")  # a command the parser does not have
            break  # `txkafka transactions ...`, `txkafka COMMAND --help`: no leaf named
        elif re.fullmatch(r"--?[A-Za-z][\w-]*(=\S*)?", word):
            flag = word.split("=")[0]
            if any(flag not in flags(p) for p in parsers):
                bad.append(f"{' '.join(path)} {flag}")
    return bad


def _doc_command_problems(docs, extract, commands: bool) -> tuple[list[str], int]:
    """What ``_unknown_flags`` finds in each ``txkafka`` command line ``extract`` takes from
    ``docs``, and how many lines it checked."""
    from txkafka.cli import _load_extensions, build_parser

    _load_extensions()
    root = build_parser()
    bad, seen = [], 0
    for doc in docs:
        for n, rest in extract(doc.read_text()):
            seen += 1
            bad += [f"{doc.relative_to(REPO)}:{n}: {b}"
                    for b in _unknown_flags(root, rest.split(), commands=commands)]
    return bad, seen


def test_every_flag_the_docs_show_for_a_command_is_one_it_takes():
    bad, seen = _doc_command_problems(DOCS, _command_lines, commands=False)
    assert seen > 100 and not bad, bad


# ---- design.md's failure matrix: each row names the tests that prove it ----------------------

def test_each_failure_matrix_row_names_tests_that_exist():
    """The last column of design.md's failure matrix names the tests of each row
    (``file.py::test_name``, file under integration_tests/ unless it starts with tests/), or says
    why none can (``none: ...``); every named test exists."""
    page = (REPO / "docs" / "design.md").read_text()
    section = page.split("## Failure matrix", 1)[1].split("\n## ", 1)[0]
    header, rows = _tables(section)[0]
    assert header[-1] == "tested by", header
    problems = []
    for row in rows:
        named = re.findall(r"`((?:tests/|integration_tests/)?[\w/]+\.py)::(\w+)`", row[-1])
        if not named and not row[-1].startswith("none:"):
            problems.append(f"{row[0][:60]}: names no test")
        for path, test in named:
            file = REPO / (path if path.startswith(("tests/", "integration_tests/"))
                           else f"integration_tests/{path}")
            if not file.exists() or not re.search(rf"^\s*def {test}\(", file.read_text(), re.M):
                problems.append(f"{row[0][:60]}: no {path}::{test}")
    assert len(rows) >= 25 and not problems, problems


def test_every_test_a_page_cites_exists():
    """A page that says what proves a claim names a test function or file that exists."""
    names = {m for folder in ("tests", "integration_tests")
             for p in (REPO / folder).rglob("test_*.py")
             for m in (p.stem, *re.findall(r"^\s*def (test_\w+)\(", p.read_text(), re.M))}
    missing = sorted({f"{doc.relative_to(REPO)}: {n}" for doc in DOCS
                      for n in re.findall(r"\b(test_\w{8,})\b", doc.read_text())
                      if n not in names})
    assert len(names) > 500 and not missing, missing


# ---- every `txkafka ...` the docs show is a command the real parser has -----------------------

# CHANGELOG.md is history: it names commands as they were then.
CURRENT_DOCS = [d for d in DOCS if d.name != "CHANGELOG.md"]


def _code_commands(text: str) -> list[tuple[int, str]]:
    """Each ``txkafka ...`` in code (a fenced block's line, or a code span starting with it), with
    its line number and the words after ``txkafka``."""
    out, fence = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            out += [(n, m.group(1)) for m in re.finditer(
                r"(?:^\s*|\$\(|[;&|]\s*)txkafka((?: +[^#\n;&>)]+)?)", line.split("#")[0])]
        else:
            out += [(n, m.group(1).replace("\\|", "|"))
                    for m in re.finditer(r"`txkafka((?: [^`]*)?)`", line)]
    return out


def test_every_txkafka_command_the_docs_show_parses_with_the_real_parser():
    bad, seen = _doc_command_problems(CURRENT_DOCS, _code_commands, commands=True)
    assert seen > 100 and not bad, bad


def test_every_developer_command_the_docs_show_parses():
    from txkafka.devtools.cli import build_parser

    root = build_parser()
    bad = []
    for doc in CURRENT_DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for m in re.finditer(r"python -m txkafka\.devtools((?: +[^`#\n;&>)|]+)?)", line):
                words = m.group(1).split()
                bad += [f"{doc.relative_to(REPO)}:{n}: {b}"
                        for b in _unknown_flags(root, words, commands=True)]
    assert not bad, bad


# ---- the exit statuses: one table, the code's -----------------------------------------------

def test_the_exit_status_table_is_the_codes():
    from txkafka.exit_codes import MEANINGS

    page = (REPO / "docs" / "operations-reference.md").read_text()
    table = next(rows for header, rows in _tables(page) if header == ["status", "meaning"])
    assert {int(r[0]): r[1] for r in table} == MEANINGS


# ---- error class names: each one a page names exists -----------------------------------------

# Errors of other programs that the pages name (Spark's, Python's, confluent-kafka's).
FOREIGN_ERRORS = {"StreamingQueryException", "KafkaException", "ModuleNotFoundError",
                  "OverflowError", "TimeoutError", "ValueError", "SocketTimeoutException",
                  "AnalysisException", "PythonException", "KafkaError", "ImportError",
                  "IllegalArgumentException", "IllegalStateException", "OutOfMemoryError",
                  "AbortableError", "FatalError"}


def test_every_error_class_a_page_names_exists():
    classes = _exception_classes(*(REPO / f for f in ("connector", "python_datasource",
                                                       "txkafka")))
    unknown = sorted({f"{doc.relative_to(REPO)}: {name}" for doc in CURRENT_DOCS
                      for name in re.findall(r"`([A-Z]\w*(?:Error|Exception))`", doc.read_text())
                      if name not in classes and name not in FOREIGN_ERRORS})
    assert not unknown, unknown


# ---- the option names a page's code uses are options of that side ---------------------------

def test_every_option_in_the_docs_code_is_an_option():
    from txkafka.connector.option_names import IGNORE_UNKNOWN_OPTIONS, READER, WRITER

    known = {*READER.options, *WRITER.options, IGNORE_UNKNOWN_OPTIONS}
    # Spark's own options of a query (not the data source's)
    spark = {"checkpointLocation", "path"}
    unknown = sorted({f"{doc.relative_to(REPO)}: {name}" for doc in DOCS
                      for name in re.findall(r'\.option\("([^"]+)"', doc.read_text())
                      if name not in known | spark and not name.startswith("kafka.")})
    assert not unknown, unknown


# ---- user pages: reference, not evidence -----------------------------------------------------

USER_PAGES = [REPO / "README.md", *(REPO / "docs" / f"{n}.md" for n in (
    "user-guide", "user-guide-reader", "user-guide-writer", "deployment", "managed-kafka",
    "operations", "operations-reference", "operations-security", "troubleshooting", "runbook",
    "glossary", "record-format-types", "record-format-avro", "switching"))]


def test_user_pages_name_no_test_module_or_commit():
    """Evidence (tests, modules, commits) belongs in design.md or development.md. Allowed: the
    import path of the errors and logger names, which users type."""
    internal = {n.name for folder in ("connector", "python_datasource", "txkafka")
                for p in (REPO / folder).rglob("*.py")
                for n in ast.walk(ast.parse(p.read_text()))
                if isinstance(n, ast.ClassDef) and not n.name.startswith("_")
                and not n.name.endswith(("Error", "Fault")) and n.name != "DefaultSource"}
    evidence = re.compile(
        r"integration_tests/|\btests/\w|\btest_\w+|\b(?:connector|python_datasource|txkafka)/[\w/]*\.py"
        r"|\b(?:commits?|at) `?[0-9a-f]{7,12}\b|checked by hand|load average")
    found = []
    for page in USER_PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            hits = evidence.findall(line)
            hits += re.findall(r"\btxkafka\.connector\.\w+", line) if "logger" not in line and \
                "errors" not in line else []
            hits += [c for c in internal if re.search(rf"`{c}[`.(]", line)]
            if hits:
                found.append(f"{page.relative_to(REPO)}:{n}: {sorted(set(hits))}")
    assert not found, found


def test_the_runbook_leads_with_the_restart_and_covers_every_typed_error():
    from txkafka.connector import errors

    page = (REPO / "docs" / "runbook.md").read_text()
    first = page.split("\n\n", 2)[1]
    assert "restart the query on the same checkpoint" in first.lower(), first
    table = next(rows for header, rows in _tables(page) if header[0] == "symptom or error")
    assert "crashed" in table[0][0] and "same checkpoint" in table[0][1]
    named = {n for row in table for n in re.findall(r"`(\w+)`", row[0])}
    classes = {n for n in dir(errors) if isinstance(getattr(errors, n), type)
               and issubclass(getattr(errors, n), errors.TxKafkaError)
               and n != "TxKafkaError"}
    assert not classes - named, f"docs/runbook.md has no row for {sorted(classes - named)}"


def test_the_glossary_is_sorted_and_each_term_has_an_anchor():
    rows = next(rows for header, rows in _tables((REPO / "docs" / "glossary.md").read_text())
                if header == ["term", "meaning"])
    terms = [re.sub(r"<a id=\"[\w-]+\"></a>", "", r[0]).strip() for r in rows]
    assert terms == sorted(terms, key=str.lower), terms
    assert all(r[0].startswith('<a id="') for r in rows)


def test_the_glossary_s_words_are_linked_from_the_user_pages_that_use_them():
    for term in ("decided", "task layout", "sweep", "late attempt", "roll forward"):
        using = [p for p in USER_PAGES if p.name not in ("glossary.md",)
                 and re.search(rf"\b{term}\b", p.read_text(), re.I)]
        unlinked = [p.name for p in using if "glossary.md" not in p.read_text()]
        assert not unlinked, f"{term!r}: used but the glossary is not linked from {unlinked}"


def test_third_party_platform_statements_are_dated():
    """Services and managed Spark change: what a page says of their current versions says when."""
    page = (REPO / "docs" / "managed-kafka.md").read_text()
    services = page.split("## The services", 1)[1].split("\n## ", 1)[0]
    undated = [line for line in services.splitlines()
               if line.startswith("- Transactions") and "as of 20" not in line]
    assert not undated, undated
    deployment = (REPO / "docs" / "deployment.md").read_text()
    undated = [line for line in deployment.splitlines()
               if re.search(r"Spark 4\.[0-3]\b.*\b(yet|newest|ends at)\b|\b(newest|ends at)\b.*Spark 4", line)
               and "as of 20" not in line]
    assert not undated, undated


def test_the_readme_quickstart_has_what_a_newcomer_needs():
    section = (REPO / "README.md").read_text().split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    for needed in ("txkafka broker start", "PYSPARK_PYTHON", "SparkSession", "create_topics",
                   'format("txkafka")', "read_committed", "checkpointLocation"):
        assert needed in section, needed


# ---- every page stays readable: short table cells, short prose lines --------------------------

MAX_CELL = 300
MAX_PROSE_LINE = 400


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """A page's prose lines with their numbers: outside fenced code blocks, not table rows."""
    lines = text.splitlines()
    return [(n, line) for n, (line, prose) in enumerate(zip(lines, _outside_fences(lines)), 1)
            if prose and not line.lstrip().startswith("|")]


def test_no_page_cell_exceeds_300_characters():
    """Every page (README.md and docs/*.md, user and internal alike): a longer cell belongs in a
    note under its table."""
    long = [f"{p.relative_to(REPO)}: {len(c)} chars: {c[:60]}..." for p in CURRENT_DOCS
            for header, rows in _tables(p.read_text()) for row in [header, *rows] for c in row
            if len(c) > MAX_CELL]
    assert not long, long


def test_no_page_prose_line_exceeds_400_characters():
    """Every page: a longer line is several facts; split it into sentences or bullets."""
    long = [f"{p.relative_to(REPO)}:{n}: {len(line)} chars: {line[:60]}..." for p in CURRENT_DOCS
            for n, line in _prose_lines(p.read_text()) if len(line) > MAX_PROSE_LINE]
    assert not long, long
