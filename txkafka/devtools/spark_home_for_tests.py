"""The Spark home the test suite runs Spark with: pip's pyspark, without ``python/lib/pyspark.zip``.

Why: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it
starts. Imported from that zip, pyspark is compiled again in each process, and on Python 3.11 and
3.12 the ``importlib.invalidate_caches()`` a new worker runs once Spark's files directory is on its
path re-reads the zip's whole directory once per pyspark package imported from it (about 0.1-0.2 s
of CPU per process; 3.13 defers it). The suite starts thousands of such processes.

Without the zip on disk, the path entry finds nothing and those processes import the installed
pyspark the zip was shipped inside, with the bytecode pip compiled: the same files, as
``txkafka pyspark-bytecode enable`` makes them (txkafka/installed_pyspark.py), without writing into
the environment. The home is pyspark_home's mirror without its zip.

Only for pip's layout, where the processes' Python has that very pyspark installed; ``build``
refuses any other home.
"""

from __future__ import annotations

from pathlib import Path

from .. import pyspark_home
from ..pyspark_home import ZIP_RELATIVE, PysparkHomeError


def build() -> Path:
    """The cached home for the installed pyspark (made, or remade when pyspark changed)."""
    import pyspark

    source = pyspark_home.installed_spark_home().resolve()
    if Path(pyspark.__file__).resolve().parent != source:
        raise PysparkHomeError(f"SPARK_HOME {source} is not the installed pyspark package with "
                               f"its {ZIP_RELATIVE}; leave SPARK_HOME unset")
    return pyspark_home.build(source, pyspark_home.default_target(source, "test-spark-home"),
                              with_zip=False)
