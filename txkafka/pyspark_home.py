"""A SPARK_HOME whose ``pyspark.zip`` carries bytecode: every Python process Spark starts begins faster.

Why: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the PYTHONPATH of every Python
process it starts (PythonUtils.sparkPythonPath), ahead of the installed pyspark package. The zip
that pip's pyspark (and Spark's own distribution) ships holds sources only, and Python's zipimport
never caches what it compiles, so each such process compiles the pyspark modules it imports again.
Executors' pooled workers pay it once per daemon, but a Python streaming source pays it on every
query start: Spark starts its driver-side reader process (PythonStreamingSourceRunner) fresh for
each query.

With pip's pyspark, where SPARK_HOME is the installed package, ``txkafka pyspark-bytecode enable``
avoids the compiling too (txkafka/installed_pyspark.py); this module is for the other layouts,
chiefly a Spark distribution's SPARK_HOME (``/opt/spark``), whose zip belongs to no installed
package.

Nothing installed is modified: this builds a separate directory that links everything of the
installed SPARK_HOME except ``python/lib/pyspark.zip``, which it copies with an unchecked-hash
``.pyc`` beside each ``.py``. Use it by exporting ``SPARK_HOME`` before Spark starts. A Python of
another version ignores the bytecode (zipimport checks the magic number) and compiles as before.

The copy leaves out pyspark's own test suites (``.../tests/...``: most of the zip's entries), which
no Spark process imports. Entries cost time of their own: Python 3.11's
``importlib.invalidate_caches()``, which every new worker calls once Spark has put its files
directory on ``sys.path``, re-reads the whole zip directory in pure Python once per package
imported from it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import marshal
import os
import shlex
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Callable, Optional

ZIP_RELATIVE = Path("python") / "lib" / "pyspark.zip"
# In every home mirrored here: its first line is the Spark home mirrored, so a SPARK_HOME pointing at
# a mirror mirrors the original.
MARKER = ".txkafka-pyspark-home"
_LAYOUT = 2  # bump when what build() writes changes, so existing homes are rebuilt


class PysparkHomeError(RuntimeError):
    """The installed SPARK_HOME cannot be mirrored (no pyspark.zip, or an unwritable target)."""


def installed_spark_home() -> Path:
    """The SPARK_HOME pyspark would use: $SPARK_HOME if set, else the pip-installed package."""
    env = os.environ.get("SPARK_HOME")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise PysparkHomeError("pyspark is not installed; pip install 'pyspark>=4.3'")
    return Path(next(iter(spec.submodule_search_locations)))


def default_target(source: Path, kind: str = "spark-home") -> Path:
    """One cached home per installed Spark and Python version (the bytecode is version-bound)."""
    from .cache import cache_dir

    digest = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:12]
    tag = sys.implementation.cache_tag  # e.g. cpython-311
    return cache_dir() / f"{kind}-{tag}-{digest}"


def _is_test_suite(name: str) -> bool:
    return "/tests/" in f"/{name}"


def _zip_with_bytecode(src: Path, dst: Path) -> tuple[int, int]:
    """Copy ``src`` to ``dst`` without test suites, adding ``X.pyc`` for each ``X.py``.

    Returns (modules compiled, entries left out)."""
    compiled = dropped = 0
    tmp = dst.with_name(dst.name + ".tmp")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
        names = set(zin.namelist())
        for info in zin.infolist():
            if _is_test_suite(info.filename):
                dropped += 1
                continue
            data = zin.read(info)
            zout.writestr(info, data)
            if not info.filename.endswith(".py") or info.filename + "c" in names:
                continue
            try:
                with warnings.catch_warnings():  # SyntaxWarnings of the sources are not ours to show
                    warnings.simplefilter("ignore")
                    code = compile(data, info.filename, "exec", dont_inherit=True)
            except SyntaxError:
                continue  # left to the source path, which reports it if it is ever imported
            pyc = _hash_pyc(code, importlib.util.source_hash(data))
            zout.writestr(zipfile.ZipInfo(info.filename + "c", info.date_time), pyc)
            compiled += 1
    tmp.replace(dst)
    return compiled, dropped


def _hash_pyc(code, source_hash: bytes) -> bytes:
    """PEP 552 unchecked-hash pyc: zipimport loads it without comparing it against the source."""
    flags = (0b01).to_bytes(4, "little")  # hash-based, check_source off
    return importlib.util.MAGIC_NUMBER + flags + source_hash + marshal.dumps(code)


def build(source: Optional[Path] = None, target: Optional[Path] = None,
          progress: Optional[Callable[[str], None]] = None, *, with_zip: bool = True) -> Path:
    """Create (or reuse, when up to date) the mirrored SPARK_HOME; returns its path.

    ``with_zip=False``: no pyspark.zip at all (the test suite's home,
    devtools/spark_home_for_tests.py)."""
    say = progress or (lambda m: None)
    source = (source or installed_spark_home()).resolve()
    if (source / MARKER).is_file():  # SPARK_HOME already points at a mirror
        source = Path((source / MARKER).read_text().splitlines()[0])
    src_zip = source / ZIP_RELATIVE
    if not src_zip.is_file():
        raise PysparkHomeError(f"{src_zip} not found: SPARK_HOME={source} is not a Spark home "
                               "with Python support")
    target = target or default_target(source)
    from .cache import file_lock

    try:
        with file_lock(target.parent / f".{target.name}.lock"):  # two drivers starting at once
            return _build_locked(source, src_zip, target, say, with_zip)
    except OSError as e:
        raise PysparkHomeError(f"cannot build a Spark home in {target}: {e}") from e


def _build_locked(source: Path, src_zip: Path, target: Path, say: Callable[[str], None],
                  with_zip: bool) -> Path:
    stamp = (f"{source}\n{src_zip.stat().st_size} {src_zip.stat().st_mtime_ns}\n{sys.version}\n"
             f"layout {_LAYOUT}{'' if with_zip else ', without pyspark.zip'}\n")
    marker = target / MARKER
    if marker.is_file() and marker.read_text() == stamp:
        say(f"up to date: {target}")
        return target
    if target.exists() and any(target.iterdir()) and not marker.is_file():
        raise PysparkHomeError(f"{target} exists and was not made by txkafka; choose another --out")
    target.mkdir(parents=True, exist_ok=True)
    mirror(source, target, skip=ZIP_RELATIVE)
    if not with_zip:
        marker.write_text(stamp)
        return target
    say(f"compiling {src_zip} ...")
    n, dropped = _zip_with_bytecode(src_zip, target / ZIP_RELATIVE)
    marker.write_text(stamp)
    say(f"{n} modules compiled into {target / ZIP_RELATIVE} ({dropped} test-suite entries left out)")
    return target


def mirror(source: Path, target: Path, skip: Path) -> None:
    """Link every entry of ``source`` into ``target`` except ``skip``, whose parents become real
    directories (so the caller can put its own file at ``skip``)."""
    head, rest = skip.parts[0], Path(*skip.parts[1:]) if len(skip.parts) > 1 else None
    for entry in source.iterdir():
        link = target / entry.name
        if entry.name == head:
            if rest is not None and entry.is_dir():
                if link.is_symlink():
                    link.unlink()
                link.mkdir(exist_ok=True)
                mirror(entry, link, rest)
            continue
        if link.is_symlink() and Path(os.readlink(link)) == entry:
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(entry)


def cmd_pyspark_home(args: argparse.Namespace) -> int:
    import json

    from . import exit_codes
    from .cli_options import CommandLineError

    try:
        home = build(Path(args.spark_home) if args.spark_home else None,
                     Path(args.out) if args.out else None,
                     progress=lambda m: print(f"[txkafka] {m}", file=sys.stderr, flush=True))
    except PysparkHomeError as e:
        raise CommandLineError(str(e)) from None  # --spark-home or --out is not usable
    print(json.dumps({"spark_home": str(home)}) if args.json
          else f"export SPARK_HOME={shlex.quote(str(home))}")
    return exit_codes.OK


def register_cli(sub) -> None:
    from .cli_options import add_json_flag

    p = sub.add_parser(
        "pyspark-home",
        help="build a Spark home whose pyspark.zip has bytecode (faster starts with a Spark "
             "distribution) and print its export line")
    p.add_argument("--spark-home", metavar="DIR", help="the Spark home to mirror (default: "
                   "$SPARK_HOME, else the installed pyspark)")
    p.add_argument("--out", metavar="DIR",
                   help="where to build it (default: ~/.cache/txkafka/spark-home-...)")
    add_json_flag(p, "the Spark home's path")
    p.set_defaults(func=cmd_pyspark_home)
