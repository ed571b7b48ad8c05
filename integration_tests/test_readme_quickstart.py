"""The README's quickstart runs as shown: its program, copied from the README, against the suite's
broker (the README starts one with `txkafka broker start`; the `txkafka` lines of its shell block
parse with the real parser, tests/test_docs_reference.py). Only the topic names and the checkpoint
folder are made unique, so the test can run again on the same broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def quickstart_blocks() -> tuple[str, str]:
    """The quickstart section's shell block and its Python program, as a user copies them."""
    section = README.read_text().split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    shell = re.search(r"```bash\n(.*?)```", section, re.S)
    program = re.search(r"```python\n(.*?)```", section, re.S)
    assert shell and program, "the README's quickstart lost its shell block or its program"
    return shell.group(1), program.group(1)


def test_the_shell_block_starts_a_broker_and_runs_the_program():
    shell, _ = quickstart_blocks()
    lines = [line.split("#")[0].strip() for line in shell.splitlines()]
    assert "export BOOTSTRAP=$(txkafka broker start)" in lines
    assert "python quickstart.py" in lines


def test_the_quickstart_program_runs_as_shown(kafka, tmp_path):
    _, program = quickstart_blocks()
    run = uuid.uuid4().hex[:8]
    # "orders-clean" first: it contains "orders"
    program = (program.replace('"orders-clean"', f'"qs-{run}-clean"')
               .replace('"orders"', f'"qs-{run}"')
               .replace('"group.id": "quickstart"', f'"group.id": "qs-{run}"'))
    assert program.count(f"qs-{run}") >= 5, "the README's topic names changed: update this test"
    (tmp_path / "quickstart.py").write_text(program)
    env = {**os.environ, "BOOTSTRAP": kafka.bootstrap}
    env.pop("PYSPARK_PYTHON", None)  # the program sets it, as the README says
    done = subprocess.run([sys.executable, "quickstart.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "100 records in orders-clean, each once" in done.stdout, done.stdout
    assert (tmp_path / "checkpoints" / "orders-clean").is_dir()
