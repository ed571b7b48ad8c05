"""Where Spark's Python processes import pyspark from, with real Spark: an executor's worker, a Python
streaming source's driver-side runner (started fresh per query), and the txkafka reader reading every
record through them.

- The stock installation: they import Spark's pyspark.zip, as without txkafka.
- `txkafka pyspark-bytecode enable`: its hook makes them import the installed package (with its
  bytecode) instead. Enabled in a venv of its own that sees this environment's packages, so no other
  test's processes see it.
- `txkafka pyspark-home`: they import the mirrored home's bytecode zip.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from integration_tests import jvm_archive
from integration_tests.kafka_helpers import unique
from txkafka.installed_pyspark import enable, state
from txkafka.pyspark_home import ZIP_RELATIVE

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

DRIVER = r"""
import json, sys, tempfile
from txkafka.spark_session import session_builder
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

class Probe(DataSource):
    # A streaming source whose offsets carry where its driver-side runner imported pyspark from.
    @classmethod
    def name(cls):
        return "importprobe"

    def schema(self):
        return "f string"

    def streamReader(self, schema):
        return ProbeReader()

class ProbeReader(DataSourceStreamReader):
    def initialOffset(self):
        return {"n": 0, "f": __import__("pyspark").__file__}

    def latestOffset(self):
        return {"n": 1, "f": __import__("pyspark").__file__}

    def partitions(self, start, end):
        return [InputPartition(0)]

    def read(self, partition):
        yield (__import__("pyspark").__file__,)

bootstrap, topic = sys.argv[1], sys.argv[2]
spark = session_builder("txkafka-import-probe").getOrCreate()
spark.dataSource.register(Probe)
worker = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__).collect()
probe = (spark.readStream.format("importprobe").load().writeStream.format("memory")
         .queryName("probe").option("checkpointLocation", tempfile.mkdtemp())
         .trigger(availableNow=True).start())
probe.awaitTermination(120)
runner = json.loads(probe.lastProgress["sources"][0]["endOffset"])["f"]
q = (spark.readStream.format("txkafka").option("kafka.bootstrap.servers", bootstrap)
     .option("subscribe", topic).option("startingOffsets", "earliest").load()
     .selectExpr("CAST(value AS STRING) AS v").writeStream.format("memory").queryName("got")
     .option("checkpointLocation", tempfile.mkdtemp()).trigger(availableNow=True).start())
q.awaitTermination(120)
values = sorted(r.v for r in spark.sql("SELECT v FROM got").collect())
print("RESULT " + json.dumps({"worker": worker[0], "runner": runner, "values": values,
                              "reader": spark.sql("SELECT f FROM probe").first().f}))
spark.stop()
"""


def _drive(kafka, env: dict, python: str = sys.executable) -> dict:
    topic = unique("py-imports")
    kafka.create_topic(topic, partitions=2)
    kafka.produce(topic, [(f"k{i}", f"v{i:03d}") for i in range(50)])
    jvm_archive.ready()
    env = {**{k: v for k, v in os.environ.items() if k != "SPARK_HOME"},
           "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, **env}
    run = subprocess.run([python, "-c", DRIVER, kafka.bootstrap, topic], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(run.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result["values"] == [f"v{i:03d}" for i in range(50)]
    return result


def _venv_with_hook(root: Path) -> str:
    """A venv whose first .pth adds this environment's site-packages as a site directory (its .pth
    files run too: the editable txkafka), then the pyspark-bytecode hook, as `enable` writes it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    py = root / "bin" / "python"
    site_dir = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    ours = Path(pyspark.__file__).parent.parent
    (Path(site_dir) / "00-txkafka-test-env.pth").write_text(f"import site; site.addsitedir({str(ours)!r})\n")
    enable(site_dir)
    return str(py)


def test_stock_installation_imports_spark_s_zip(kafka):
    assert state() == "disabled", "this environment has `txkafka pyspark-bytecode` enabled"
    zipped = str(Path(pyspark.__file__).parent / ZIP_RELATIVE / "pyspark" / "__init__.py")
    result = _drive(kafka, {})
    assert (result["worker"], result["runner"], result["reader"]) == (zipped,) * 3


def test_pyspark_bytecode_enabled_imports_the_installed_package(kafka, tmp_path):
    installed = pyspark.__file__  # site-packages/pyspark/__init__.py, compiled once by pip
    result = _drive(kafka, {}, python=_venv_with_hook(tmp_path / "venv"))
    assert (result["worker"], result["runner"], result["reader"]) == (installed,) * 3


def test_spark_workers_and_streaming_source_run_from_the_bytecode_zip(kafka, tmp_path):
    home = tmp_path / "spark-home"
    built = subprocess.run([sys.executable, "-m", "txkafka", "pyspark-home", "--out", str(home)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    assert built.stdout.strip() == f"export SPARK_HOME={shlex.quote(str(home))}"
    result = _drive(kafka, {"SPARK_HOME": str(home)})
    from_home = str(home / ZIP_RELATIVE / "pyspark" / "__init__.pyc")
    assert (result["worker"], result["runner"], result["reader"]) == (from_home,) * 3
