"""``txkafka pyspark-bytecode enable|disable|status``: Spark's Python processes may import the
installed pyspark, with its bytecode, instead of compiling the same sources again from ``pyspark.zip``.

Why: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the PYTHONPATH of every Python
process it starts (PythonUtils.sparkPythonPath). With pip's pyspark, SPARK_HOME is the installed
package itself, and the wheel ships that zip beside the very files it holds. Python's zipimport never
caches what it compiles, so each such process compiles pyspark again; a Python streaming source pays
it on every query start, since Spark starts its driver-side runner fresh for each query.

Off by default: installing txkafka changes no other program. ``enable`` writes one ``.pth`` line
into the site directory that holds pyspark; Python's ``site`` runs it at every interpreter start of
that environment, and it calls :func:`prefer_installed_pyspark` only in a process whose path has a
``pyspark.zip``. That drops the zip only when it lies inside the pyspark package the process would
import without it and both carry the same ``pyspark/version.py``: the code that runs is the same,
read from its compiled bytecode. Any other layout (a Spark distribution's SPARK_HOME, another
pyspark first on the path, a version mismatch) is left alone. ``disable`` removes the line.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Optional

PTH_NAME = "txkafka-installed-pyspark.pth"
# One line: site runs lines that start with "import". Processes without a pyspark.zip on their path
# pay one scan of sys.path; a txkafka uninstalled while the file stays makes it a no-op, not an error.
PTH_LINE = ("import sys; any(isinstance(p, str) and p.endswith('pyspark.zip') for p in sys.path) "
            "and __import__('importlib.util').util.find_spec('txkafka') is not None "
            "and __import__('txkafka.installed_pyspark', fromlist=['_']).prefer_installed_pyspark()\n")
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


# ----------------------------------------------------------------- txkafka pyspark-bytecode


class PysparkBytecodeError(RuntimeError):
    """The hook cannot be switched here (no pip-installed pyspark, or an unwritable site directory)."""


def _site_dirs() -> list[str]:
    import site

    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return dirs


def hook_site_dir() -> str:
    """The site directory holding the pyspark this interpreter imports: where the hook must live,
    since it only ever serves that pyspark's own zip."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise PysparkBytecodeError("pyspark is not installed in this Python; pip install 'pyspark>=4.3'")
    parent = os.path.dirname(os.path.abspath(next(iter(spec.submodule_search_locations))))
    for d in _site_dirs():
        if os.path.realpath(d) == os.path.realpath(parent):
            return d
    raise PysparkBytecodeError(
        f"pyspark is imported from {parent}, not from a site directory of {sys.executable}: the hook "
        "serves only a pip-installed pyspark. With a Spark distribution's SPARK_HOME, build a Spark "
        "home with bytecode instead: txkafka pyspark-home")


def hook_files() -> list[str]:
    """Every hook file of this environment (normally none, or one beside pyspark)."""
    return [os.path.join(d, PTH_NAME) for d in _site_dirs() if os.path.isfile(os.path.join(d, PTH_NAME))]


def enable(site_dir: Optional[str] = None) -> str:
    """Write the hook into ``site_dir`` (default: beside pyspark); returns the file written."""
    target = os.path.join(site_dir or hook_site_dir(), PTH_NAME)
    try:
        tmp = target + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(PTH_LINE)
        os.replace(tmp, target)
    except OSError as e:
        raise PysparkBytecodeError(f"cannot write {target}: {e}; run the command as the user that "
                                   "installed this Python environment") from e
    return target


def disable(site_dirs: Optional[list[str]] = None) -> list[str]:
    """Remove the hook from ``site_dirs`` (default: every site directory); returns the files removed."""
    removed = []
    for d in site_dirs if site_dirs is not None else _site_dirs():
        path = os.path.join(d, PTH_NAME)
        if os.path.isfile(path):
            try:
                os.unlink(path)
            except OSError as e:
                raise PysparkBytecodeError(f"cannot remove {path}: {e}") from e
            removed.append(path)
    return removed


def state(files: Optional[list[str]] = None) -> str:
    """``enabled``, ``disabled`` or ``outdated`` (a hook file written by another txkafka version)."""
    files = hook_files() if files is None else files
    if not files:
        return "disabled"
    for f in files:
        with open(f) as fh:
            if fh.read() != PTH_LINE:
                return "outdated"
    return "enabled"


def cmd_pyspark_bytecode(args) -> int:
    from . import exit_codes
    from .cli_options import CommandLineError

    try:
        if args.action == "enable":
            print(f"enabled: {enable()}")
        elif args.action == "disable":
            removed = disable()
            print("disabled" + (f": removed {', '.join(removed)}" if removed else " (it was off)"))
        files = hook_files()
        imports_from = spark_python_imports_from()
        if args.action == "status":
            if args.json:
                print(json.dumps({"state": state(files), "hook_files": files,
                                  "spark_python_imports_pyspark_from": imports_from}, indent=2))
                return exit_codes.OK
            print(f"pyspark-bytecode: {state(files)}" + (f" ({', '.join(files)})" if files else ""))
            if state(files) == "outdated":
                print("  the hook file differs from this txkafka's: run `txkafka pyspark-bytecode enable`")
        print(f"Spark's Python processes import pyspark from: {imports_from}")
    except PysparkBytecodeError as e:
        raise CommandLineError.needs_operator(str(e)) from None
    return exit_codes.OK


def register_cli(sub) -> None:
    from .cli_options import add_json_flag

    p = sub.add_parser(
        "pyspark-bytecode",
        help="make Spark's Python processes import the installed pyspark's bytecode, not "
             "compile pyspark.zip again (faster starts with pip's pyspark; off by default)")
    psub = p.add_subparsers(dest="action", required=True, title="actions", metavar="ACTION")
    psub.add_parser("enable", help="install the import hook beside pyspark").set_defaults(
        func=cmd_pyspark_bytecode)
    psub.add_parser("disable", help="remove the import hook").set_defaults(
        func=cmd_pyspark_bytecode)
    st = psub.add_parser("status", help="print whether the hook is on, and where Spark's "
                         "Python processes import pyspark from")
    add_json_flag(st, "the status")
    st.set_defaults(func=cmd_pyspark_bytecode)
