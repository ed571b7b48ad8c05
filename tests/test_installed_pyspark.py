"""The .pth hook that lets Spark's Python processes import the installed pyspark's bytecode: it drops
``pyspark.zip`` only where the zip holds the same files as the package that then gets imported."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from txkafka import installed_pyspark
from txkafka.installed_pyspark import OPT_OUT_ENV, PTH_NAME, prefer_installed_pyspark

REPO = Path(__file__).resolve().parent.parent


def _fake_install(root: Path, version: str = "4.3.0", zip_version: str | None = None) -> tuple[Path, Path]:
    """site-packages with pyspark/ and the wheel's pyspark/python/lib/pyspark.zip inside it."""
    site_dir = root / "site-packages"
    pkg = site_dir / "pyspark"
    (pkg / "python" / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "version.py").write_text(f'__version__ = "{version}"\n')
    zpath = pkg / "python" / "lib" / "pyspark.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("pyspark/__init__.py", "")
        z.writestr("pyspark/version.py", f'__version__ = "{zip_version or version}"\n')
    return site_dir, zpath


@pytest.fixture(autouse=True)
def _no_opt_out(monkeypatch):
    monkeypatch.delenv(OPT_OUT_ENV, raising=False)


def test_drops_the_packages_own_zip_and_its_importer(tmp_path):
    site_dir, zpath = _fake_install(tmp_path)
    py4j = str(zpath.parent / "py4j-0.10.9.9-src.zip")  # absent: skipped like the import system does
    path = [str(zpath), py4j, "/nonexistent/stdlib.zip", str(site_dir)]
    sys.path_importer_cache[str(zpath)] = None
    try:
        assert prefer_installed_pyspark(path) == str(zpath)
        assert path == [py4j, "/nonexistent/stdlib.zip", str(site_dir)]
        assert str(zpath) not in sys.path_importer_cache
    finally:
        sys.path_importer_cache.pop(str(zpath), None)


def test_same_package_through_a_symlinked_site_dir(tmp_path):
    site_dir, zpath = _fake_install(tmp_path)
    link = tmp_path / "lib64"
    link.symlink_to(site_dir)
    path = [str(zpath), str(link)]
    assert prefer_installed_pyspark(path) == str(zpath)
    assert path == [str(link)]


@pytest.mark.parametrize("case", ["distribution", "version", "other_dir_first", "archive_first",
                                  "no_package", "opt_out"])
def test_leaves_spark_s_path_alone(tmp_path, monkeypatch, case):
    site_dir, zpath = _fake_install(tmp_path, zip_version="4.3.1" if case == "version" else None)
    path = [str(zpath), str(site_dir)]
    if case == "distribution":  # $SPARK_HOME=/opt/spark: the zip is not inside an installed pyspark
        dist = tmp_path / "opt" / "spark" / "python" / "lib"
        dist.mkdir(parents=True)
        (dist / "pyspark.zip").write_bytes(zpath.read_bytes())
        path = [str(dist / "pyspark.zip"), str(site_dir)]
    elif case == "other_dir_first":  # a user's PYTHONPATH with its own pyspark comes before site
        other = tmp_path / "mine"
        (other / "pyspark").mkdir(parents=True)
        (other / "pyspark" / "__init__.py").write_text("")
        path = [str(zpath), str(other), str(site_dir)]
    elif case == "archive_first":
        egg = tmp_path / "other.zip"
        with zipfile.ZipFile(egg, "w") as z:
            z.writestr("pyspark/__init__.py", "")
        path = [str(zpath), str(egg), str(site_dir)]
    elif case == "no_package":
        path = [str(zpath)]
    elif case == "opt_out":
        monkeypatch.setenv(OPT_OUT_ENV, "1")
    before = list(path)
    assert prefer_installed_pyspark(path) is None
    assert path == before


def test_never_raises(tmp_path, monkeypatch):
    site_dir, zpath = _fake_install(tmp_path)

    def boom(*_a, **_k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(installed_pyspark, "_first_pyspark", boom)
    path = [str(zpath), str(site_dir), 42]
    assert prefer_installed_pyspark(path) is None
    assert path == [str(zpath), str(site_dir), 42]


def test_wheel_build_and_editable_install_carry_the_same_pth():
    """setup.py puts this file at the top of a wheel; .ci/editable_toplevel.py copies it into an
    editable install's site-packages (make install runs it)."""
    text = (REPO / PTH_NAME).read_text()
    assert text.startswith("import ") and text.count("\n") == 1  # site runs 'import' lines only
    installed = Path(site.getsitepackages()[0]) / PTH_NAME
    assert installed.read_text() == text, f"run .ci/editable_toplevel.py ({installed} differs)"


def _spark_like_import(extra_env: dict) -> str:
    """Start Python the way Spark starts its workers: pyspark's own zip first on PYTHONPATH."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    py4j = next(lib.glob("py4j-*-src.zip"))
    env = {k: v for k, v in os.environ.items() if k != OPT_OUT_ENV}
    env.update(PYTHONPATH=os.pathsep.join([str(lib / "pyspark.zip"), str(py4j)]), **extra_env)
    out = subprocess.run([sys.executable, "-c", "import pyspark.sql, pyspark; print(pyspark.__file__)"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "", out.stderr  # the .pth line prints nothing, even on a failed check
    return out.stdout.strip()


def test_spark_started_python_imports_the_installed_package():
    import pyspark

    assert _spark_like_import({}) == pyspark.__file__
    zipped = _spark_like_import({OPT_OUT_ENV: "1"})
    assert zipped.endswith(os.path.join("pyspark.zip", "pyspark", "__init__.py")), zipped


def test_benchmarks_record_where_spark_python_imports_pyspark(monkeypatch):
    import pyspark

    from txkafka.installed_pyspark import spark_python_imports_from

    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert spark_python_imports_from() == pyspark.__file__
    monkeypatch.setenv(OPT_OUT_ENV, "1")
    assert spark_python_imports_from().endswith(os.path.join("pyspark.zip", "pyspark", "__init__.py"))
