"""Spark's Python processes import the installed pyspark, with its bytecode, instead of compiling
the same sources again from ``pyspark.zip``.

Why: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the PYTHONPATH of every Python
process it starts (PythonUtils.sparkPythonPath). With pip's pyspark, SPARK_HOME is the installed
package itself, and the wheel ships that zip beside the very files it holds (pyspark 4.3: the 386
files both have are byte-for-byte equal; the zip adds test suites and six files no module loads).
Python's zipimport never caches what it compiles, so each such process compiles pyspark again:
0.6-0.9 s of a streaming query's start on the machine of docs/benchmarks.md, paid on every query
because Spark starts the Python streaming source's driver-side runner fresh for each one.

The ``txkafka-installed-pyspark.pth`` file that pip installs with txkafka calls
:func:`prefer_installed_pyspark` at interpreter start, before anything imports pyspark. It drops the
zip from ``sys.path`` only when the zip lies inside the pyspark package the process would import
without it, and both carry the same ``pyspark/version.py``; the code that runs is the same, read
from its compiled bytecode. Any other layout (a Spark distribution's SPARK_HOME, another pyspark
first on the path, a version mismatch) is left alone, as is every process whose path has no
``pyspark.zip`` (the check is one scan of ``sys.path``). ``TXKAFKA_KEEP_PYSPARK_ZIP=1`` turns it off.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

OPT_OUT_ENV = "TXKAFKA_KEEP_PYSPARK_ZIP"
PTH_NAME = "txkafka-installed-pyspark.pth"
_ZIP_IN_PACKAGE = os.path.join("pyspark", "python", "lib", "pyspark.zip")


def prefer_installed_pyspark(path: Optional[list] = None) -> Optional[str]:
    """Remove the installed package's own ``pyspark.zip`` from ``path`` (default ``sys.path``).

    Returns the entry removed, or None when nothing qualified. Never raises: it runs from a .pth
    file in every Python process Spark starts, where an error would only add noise to stderr."""
    try:
        return _prefer(sys.path if path is None else path)
    except Exception:  # noqa: BLE001 - a failed check leaves the path as Spark set it
        return None


def _prefer(path: list) -> Optional[str]:
    if os.environ.get(OPT_OUT_ENV, "").strip() not in ("", "0"):
        return None
    for i, entry in enumerate(path):
        if not isinstance(entry, str) or not entry.endswith("pyspark.zip"):
            continue
        if not entry.endswith(os.sep + _ZIP_IN_PACKAGE):
            return None  # a Spark distribution's zip: no installed package holds the same files
        package = os.path.dirname(os.path.dirname(os.path.dirname(entry)))  # .../pyspark
        rest = path[:i] + path[i + 1:]
        found = _first_pyspark(rest)
        if found is None or os.path.realpath(found) != os.path.realpath(package):
            return None  # without the zip another pyspark would win: keep Spark's choice
        if not _same_version(entry, package):
            return None
        del path[i]
        sys.path_importer_cache.pop(entry, None)
        return entry
    return None


def _first_pyspark(path: list) -> Optional[str]:
    """The pyspark package directory an import would find first on ``path``, or None when an
    archive (whose contents this does not inspect cheaply) or nothing would provide it."""
    import zipimport

    for entry in path:
        if not isinstance(entry, str):
            continue
        base = entry or os.getcwd()
        if os.path.isdir(base):
            if os.path.isfile(os.path.join(base, "pyspark", "__init__.py")):
                return os.path.join(base, "pyspark")
        elif os.path.isfile(base):
            try:
                if zipimport.zipimporter(base).find_spec("pyspark") is not None:
                    return None  # an archive's pyspark would win
            except Exception:  # noqa: BLE001 - not an archive: the import system skips it too
                continue
    return None


def _same_version(zip_path: str, package: str) -> bool:
    import zipimport

    try:
        zipped = zipimport.zipimporter(zip_path).get_data("pyspark/version.py")
        with open(os.path.join(package, "version.py"), "rb") as fh:
            return fh.read() == zipped
    except (OSError, zipimport.ZipImportError):
        return False


def spark_python_imports_from(spark_home: Optional[str] = None) -> str:
    """``pyspark.__file__`` in a Python started the way Spark starts its workers (the Spark home's
    ``pyspark.zip`` and py4j first on PYTHONPATH): what benchmark results record, since the import
    cost of every Python streaming query's start depends on it."""
    import glob
    import subprocess

    # Not at module level: the .pth imports this module in every Python process Spark starts.
    from .pyspark_home import PysparkHomeError, installed_spark_home

    if spark_home is None:
        try:
            spark_home = str(installed_spark_home())
        except PysparkHomeError:
            return "?"
    lib = os.path.join(spark_home, "python", "lib")
    entries = [os.path.join(lib, "pyspark.zip")] + sorted(glob.glob(os.path.join(lib, "py4j-*-src.zip")))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(entries))
    try:
        out = subprocess.run([sys.executable, "-c", "import pyspark; print(pyspark.__file__)"],
                             capture_output=True, text=True, env=env, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.stdout.strip() if out.returncode == 0 else "?"
