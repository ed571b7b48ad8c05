"""The mirrored SPARK_HOME: links everything, adds bytecode to pyspark.zip, never touches the source."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from txkafka.pyspark_home import PysparkHomeError, ZIP_RELATIVE, build

MODULE = "VALUE = 42\n"


def _fake_home(root: Path, value: str = MODULE) -> Path:
    home = root / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (home / "jars").mkdir()
    lib = home / "python" / "lib"
    lib.mkdir(parents=True)
    (lib / "py4j-src.zip").write_bytes(b"py4j")
    (home / "python" / "pyspark").mkdir()
    with zipfile.ZipFile(lib / "pyspark.zip", "w") as z:
        z.writestr("fakepkg/__init__.py", "")
        z.writestr("fakepkg/mod.py", value)
    return home


def _import_from(zip_path: Path) -> list[str]:
    """Import fakepkg.mod in a fresh interpreter with only ``zip_path`` added, like a Spark worker."""
    code = "import fakepkg.mod as m; print(m.VALUE); print(m.__file__)"
    env = dict(os.environ, PYTHONPATH=str(zip_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


def test_bytecode_is_what_a_worker_imports_and_the_rest_is_linked(tmp_path):
    source = _fake_home(tmp_path)
    original = (source / ZIP_RELATIVE).read_bytes()
    home = build(source, tmp_path / "mirror")

    value, loaded = _import_from(home / ZIP_RELATIVE)
    assert value == "42" and loaded.endswith("fakepkg/mod.pyc")
    # the installed zip, as Spark ships it, loads the source (what the mirror saves)
    assert _import_from(source / ZIP_RELATIVE)[1].endswith("fakepkg/mod.py")

    assert (home / "bin").is_symlink() and (home / "bin").resolve() == (source / "bin").resolve()
    assert (home / "python" / "lib" / "py4j-src.zip").is_symlink()
    assert (home / "python" / "pyspark").is_symlink()
    assert not (home / ZIP_RELATIVE).is_symlink()
    assert (source / ZIP_RELATIVE).read_bytes() == original


def test_reused_while_current_and_rebuilt_when_spark_changes(tmp_path):
    source = _fake_home(tmp_path)
    home = build(source, tmp_path / "mirror")
    built = (home / ZIP_RELATIVE).stat().st_mtime_ns
    assert build(source, tmp_path / "mirror") == home
    assert (home / ZIP_RELATIVE).stat().st_mtime_ns == built

    with zipfile.ZipFile(source / ZIP_RELATIVE, "w") as z:  # pyspark upgraded in place
        z.writestr("fakepkg/__init__.py", "")
        z.writestr("fakepkg/mod.py", "VALUE = 43  # a longer source than before\n")
    build(source, tmp_path / "mirror")
    assert _import_from(home / ZIP_RELATIVE)[0] == "43"


def test_spark_home_pointing_at_a_mirror_mirrors_the_original(tmp_path, monkeypatch):
    source = _fake_home(tmp_path)
    home = build(source, tmp_path / "mirror")
    monkeypatch.setenv("SPARK_HOME", str(home))
    again = build(target=tmp_path / "mirror2")
    assert (again / "bin").resolve() == (source / "bin").resolve()


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(PysparkHomeError, match=r"pyspark\.zip not found"):
        build(tmp_path, tmp_path / "mirror")
    foreign = tmp_path / "taken"
    foreign.mkdir()
    (foreign / "file").write_text("x")
    with pytest.raises(PysparkHomeError, match="not made by txkafka"):
        build(_fake_home(tmp_path), foreign)


def test_source_that_does_not_compile_stays_source_only(tmp_path):
    source = _fake_home(tmp_path, value="def broken(:\n")
    home = build(source, tmp_path / "mirror")
    with zipfile.ZipFile(home / ZIP_RELATIVE) as z:
        names = set(z.namelist())
    assert "fakepkg/mod.py" in names and "fakepkg/mod.pyc" not in names
    assert "fakepkg/__init__.pyc" in names


def test_pyspark_test_suites_are_left_out(tmp_path):
    source = _fake_home(tmp_path)
    with zipfile.ZipFile(source / ZIP_RELATIVE, "a") as z:
        z.writestr("fakepkg/tests/__init__.py", "")
        z.writestr("fakepkg/tests/test_mod.py", "X = 1\n")
        z.writestr("fakepkg/testing/utils.py", "Y = 2\n")  # a helper module, not a test suite
    home = build(source, tmp_path / "mirror")
    with zipfile.ZipFile(home / ZIP_RELATIVE) as z:
        names = set(z.namelist())
    assert not any("/tests/" in n for n in names)
    assert {"fakepkg/testing/utils.py", "fakepkg/testing/utils.pyc"} <= names


def test_unwritable_target_is_a_named_error(tmp_path):
    source = _fake_home(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(PysparkHomeError, match="cannot build a Spark home in"):
        build(source, blocker / "mirror")


def test_cli_prints_a_line_a_shell_can_eval(tmp_path):
    source = _fake_home(tmp_path)
    out = tmp_path / "with space"
    proc = subprocess.run([sys.executable, "-m", "txkafka", "pyspark-home", "--spark-home",
                           str(source), "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    shell = subprocess.run(["bash", "-c", proc.stdout + '\nprintf %s "$SPARK_HOME"'],
                           capture_output=True, text=True, check=True)
    assert shell.stdout == str(out)
    missing = subprocess.run([sys.executable, "-m", "txkafka", "pyspark-home", "--spark-home",
                              str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert missing.returncode == 2 and "pyspark.zip not found" in missing.stderr
