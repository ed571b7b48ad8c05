"""The opt-in .pth hook that lets Spark's Python processes import the installed pyspark's bytecode
(``txkafka pyspark-bytecode``): it drops ``pyspark.zip`` only where the zip holds the same files as
the package that then gets imported, and it is there only after ``enable``."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from txkafka import installed_pyspark
from txkafka.cli import main as txkafka_main
from txkafka.installed_pyspark import (PTH_LINE, PTH_NAME, PysparkBytecodeError, disable, enable,
                                       hook_site_dir, prefer_installed_pyspark, state)


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
                                  "no_package"])
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


def test_enable_disable_status_in_a_site_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(installed_pyspark, "_site_dirs", lambda: [str(tmp_path)])
    assert state() == "disabled"
    written = enable(str(tmp_path))
    assert written == str(tmp_path / PTH_NAME)
    text = (tmp_path / PTH_NAME).read_text()
    assert text == PTH_LINE and text.startswith("import ") and text.count("\n") == 1  # site runs it
    assert state() == "enabled"
    (tmp_path / PTH_NAME).write_text("import sys\n")  # another version's line
    assert state() == "outdated"
    assert disable() == [str(tmp_path / PTH_NAME)]
    assert state() == "disabled" and disable() == []


def test_the_hook_goes_beside_the_installed_pyspark():
    import pyspark

    assert os.path.realpath(hook_site_dir()) == os.path.realpath(Path(pyspark.__file__).parent.parent)


def test_a_pyspark_outside_site_packages_is_refused(tmp_path, monkeypatch):
    (tmp_path / "pyspark").mkdir()
    (tmp_path / "pyspark" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pyspark", raising=False)
    with pytest.raises(PysparkBytecodeError, match="txkafka pyspark-home"):
        hook_site_dir()


def test_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(installed_pyspark, "_site_dirs", lambda: [str(tmp_path)])
    monkeypatch.setattr(installed_pyspark, "hook_site_dir", lambda: str(tmp_path))
    monkeypatch.setattr(installed_pyspark, "spark_python_imports_from", lambda: "/x/pyspark/__init__.py")
    assert txkafka_main(["pyspark-bytecode", "status"]) == 0
    assert "pyspark-bytecode: disabled" in capsys.readouterr().out
    assert txkafka_main(["pyspark-bytecode", "enable"]) == 0
    assert (tmp_path / PTH_NAME).read_text() == PTH_LINE
    assert txkafka_main(["pyspark-bytecode", "status"]) == 0
    assert f"pyspark-bytecode: enabled ({tmp_path / PTH_NAME})" in capsys.readouterr().out
    assert txkafka_main(["pyspark-bytecode", "disable"]) == 0
    assert not (tmp_path / PTH_NAME).exists()


def _spark_like_import(hook_dir: Path | None = None) -> str:
    """Start Python the way Spark starts its workers: pyspark's own zip first on PYTHONPATH. A
    ``hook_dir`` is added as a site directory first thing, as site adds site-packages at start-up."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    py4j = next(lib.glob("py4j-*-src.zip"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(lib / "pyspark.zip"), str(py4j)]))
    code = "import pyspark.sql, pyspark; print(pyspark.__file__)"
    if hook_dir is not None:
        code = f"import site; site.addsitedir({str(hook_dir)!r}); " + code
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "", out.stderr  # the .pth line prints nothing, even on a failed check
    return out.stdout.strip()


def test_spark_started_python_imports_the_installed_package_once_enabled(tmp_path):
    import pyspark

    zipped = _spark_like_import()
    assert zipped.endswith(os.path.join("pyspark.zip", "pyspark", "__init__.py")), zipped
    enable(str(tmp_path))
    assert _spark_like_import(tmp_path) == pyspark.__file__
    disable([str(tmp_path)])
    assert _spark_like_import(tmp_path) == zipped


def test_benchmarks_record_where_spark_python_imports_pyspark(monkeypatch):
    from txkafka.installed_pyspark import spark_python_imports_from

    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert spark_python_imports_from().endswith(os.path.join("pyspark.zip", "pyspark", "__init__.py"))
