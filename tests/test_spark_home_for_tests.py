"""The test suite's Spark home: the installed pyspark's, linked, without python/lib/pyspark.zip, so
a Python process Spark starts finds pyspark in the installed package (with its bytecode)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from txkafka.devtools import spark_home_for_tests
from txkafka.pyspark_home import ZIP_RELATIVE, PysparkHomeError


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TXKAFKA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    return tmp_path / "cache"


def test_a_worker_started_the_way_spark_starts_it_imports_the_installed_package(cache):
    home = spark_home_for_tests.build()
    installed = Path(pyspark.__file__).parent
    assert home.parent == cache
    assert not (home / ZIP_RELATIVE).exists() and (installed / ZIP_RELATIVE).is_file()
    assert (home / "bin").resolve() == (installed / "bin").resolve()
    py4j = [p.name for p in (home / "python" / "lib").iterdir()]
    assert py4j and all(n.startswith("py4j") for n in py4j)
    # Spark's worker path: the home's pyspark.zip first, then the py4j zip (PythonUtils).
    path = os.pathsep.join([str(home / ZIP_RELATIVE),
                            *(str(home / "python" / "lib" / n) for n in py4j)])
    out = subprocess.run([sys.executable, "-c", "import pyspark; print(pyspark.__file__)"],
                         env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == pyspark.__file__
    assert spark_home_for_tests.build() == home  # reused


def test_another_spark_home_is_refused(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    with pytest.raises(PysparkHomeError, match="not the installed pyspark package"):
        spark_home_for_tests.build()


def test_txkafka_pyspark_home_under_it_mirrors_the_installed_home(cache, tmp_path, monkeypatch):
    """The benchmarks' --pyspark-home inside the suite: SPARK_HOME is this home, and the bytecode
    home is built from the installed pyspark it mirrors, zip included."""
    from txkafka import pyspark_home

    monkeypatch.setenv("SPARK_HOME", str(spark_home_for_tests.build()))
    assert pyspark_home.installed_spark_home() != Path(pyspark.__file__).parent
    with monkeypatch.context() as m:  # compiling pyspark's zip is not this test's subject
        m.setattr(pyspark_home, "_zip_with_bytecode", lambda src, dst: (dst.write_bytes(
            src.read_bytes()), (0, 0))[1])
        home = pyspark_home.build(target=tmp_path / "bytecode-home")
    assert (home / ZIP_RELATIVE).read_bytes() == \
        (Path(pyspark.__file__).parent / ZIP_RELATIVE).read_bytes()
