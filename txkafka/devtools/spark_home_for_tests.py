"""The Spark home the test suite runs Spark with: pip's pyspark, without ``python/lib/pyspark.zip``.

Why: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it
starts. Imported from that zip, pyspark is compiled again in each process, and on Python 3.11 and
3.12 the ``importlib.invalidate_caches()`` a new worker runs once Spark's files directory is on its
path re-reads the zip's whole directory once per pyspark package imported from it (about 0.1-0.2 s
of CPU per process; 3.13 defers it). The suite starts thousands of such processes.

Without the zip on disk, the path entry finds nothing and those processes import the installed
pyspark the zip was shipped inside, with the bytecode pip compiled: the same files, as
``txkafka pyspark-bytecode enable`` makes them (txkafka/installed_pyspark.py), without writing into
the environment. Everything else of the installed home is linked (pyspark_home.mirror).

Only for pip's layout, where the processes' Python has that very pyspark installed; ``build``
refuses any other home.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from ..embedded_kafka import cache_dir, file_lock
from ..pyspark_home import MARKER, ZIP_RELATIVE, PysparkHomeError, installed_spark_home, mirror


def build() -> Path:
    """The cached home for the installed pyspark (made, or remade when pyspark changed)."""
    source = installed_spark_home().resolve()
    zipped = source / ZIP_RELATIVE
    import pyspark

    if Path(pyspark.__file__).resolve().parent != source or not zipped.is_file():
        raise PysparkHomeError(f"SPARK_HOME {source} is not the installed pyspark package with "
                               f"its {ZIP_RELATIVE}; leave SPARK_HOME unset")
    digest = hashlib.sha256(str(source).encode()).hexdigest()[:12]
    target = cache_dir() / f"test-spark-home-{sys.implementation.cache_tag}-{digest}"
    # pyspark_home's marker (first line: the home mirrored), so `txkafka pyspark-home` run with
    # SPARK_HOME at this home mirrors the installed one, as the benchmarks do under the suite.
    stamp = f"{source}\n{zipped.stat().st_size} {zipped.stat().st_mtime_ns}\nfor tests\n"
    try:
        with file_lock(target.parent / f".{target.name}.lock"):
            marker = target / MARKER
            if not (marker.is_file() and marker.read_text() == stamp):
                target.mkdir(parents=True, exist_ok=True)
                mirror(source, target, skip=ZIP_RELATIVE)
                marker.write_text(stamp)
    except OSError as e:
        raise PysparkHomeError(f"cannot build the tests' Spark home in {target}: {e}") from e
    return target
