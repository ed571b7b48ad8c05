"""Spark settings that load Spark's own ``kafka`` connector, for side-by-side comparisons.

Spark's connector is a JVM package set at JVM start (``spark.jars.packages``, resolved by Spark's
Ivy). The one matching the installed pyspark is preferred; where Maven cannot resolve it (a pyspark
released before its connector), the newest resolvable 4.x connector is used, and where its
token-provider dependency is missing too, that dependency is excluded and the newest resolvable
token provider jar is added instead (it only serves delegation tokens, which the comparisons never
use). Artifacts are looked up by name through ``mvn``, from the repositories Maven is configured
with, as for the embedded broker's jars; answers are cached in the txkafka cache folder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from .embedded_kafka import cache_dir

GROUP = "org.apache.spark"
CONNECTOR = "spark-sql-kafka-0-10_2.13"
TOKEN_PROVIDER = "spark-token-provider-kafka-0-10_2.13"
_CANDIDATES = ("4.3.1", "4.3.0", "4.2.1", "4.2.0", "4.1.1", "4.1.0", "4.0.1", "4.0.0")
_MVN_TIMEOUT_S = 300


class SparkKafkaPackageError(RuntimeError):
    """Spark's own Kafka connector cannot be resolved through Maven."""


def _mvn(*goal_args: str) -> subprocess.CompletedProcess:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SparkKafkaPackageError(
            "Maven ('mvn') is needed to look up Spark's Kafka connector for the comparison with "
            "Spark's built-in source and sink; install it (Debian: apt-get install maven), or run "
            "`txkafka bench --skip-builtin`")
    return subprocess.run([mvn, "-B", "-q", *goal_args], capture_output=True, text=True,
                          timeout=_MVN_TIMEOUT_S)


def _resolvable(artifact_id: str, version: str) -> bool:
    """Maven resolves ``GROUP:artifact_id:version`` (its pom; fetched into ~/.m2 once)."""
    return _mvn("dependency:get", f"-Dartifact={GROUP}:{artifact_id}:{version}:pom",
                "-Dtransitive=false").returncode == 0


def _newest(artifact_id: str, upto: str) -> str | None:
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))

    for v in _CANDIDATES:
        if key(v) <= key(upto) and _resolvable(artifact_id, v):
            return v
    return None


def _copy_jar(artifact_id: str, version: str, folder: Path) -> Path:
    jar = folder / f"{artifact_id}-{version}.jar"
    if not jar.exists():
        got = _mvn("dependency:copy", f"-Dartifact={GROUP}:{artifact_id}:{version}",
                   f"-DoutputDirectory={folder}")
        if got.returncode != 0 or not jar.exists():
            raise SparkKafkaPackageError(f"mvn could not fetch {GROUP}:{artifact_id}:{version}:\n"
                                         + (got.stdout + got.stderr)[-2000:])
    return jar


def builtin_kafka_conf(spark_version: str | None = None) -> dict[str, str]:
    """Spark conf entries that put Spark's built-in ``kafka`` format on the classpath."""
    import pyspark

    version = spark_version or pyspark.__version__
    cache = cache_dir() / "spark-kafka"
    cache.mkdir(parents=True, exist_ok=True)
    answer = cache / f"resolved-{version}.json"
    if answer.exists():
        return json.loads(answer.read_text())
    conf: dict[str, str] = {"spark.jars.ivy": str(cache_dir() / "ivy")}
    connector = version if _resolvable(CONNECTOR, version) else _newest(CONNECTOR, version)
    if connector is None:
        raise SparkKafkaPackageError(f"Maven resolves no {GROUP}:{CONNECTOR} 4.x up to {version}")
    conf["spark.jars.packages"] = f"{GROUP}:{CONNECTOR}:{connector}"
    if not _resolvable(TOKEN_PROVIDER, connector):
        token = _newest(TOKEN_PROVIDER, connector)
        if token is None:
            raise SparkKafkaPackageError(f"Maven resolves no {GROUP}:{TOKEN_PROVIDER} up to {connector}")
        conf["spark.jars.excludes"] = f"{GROUP}:{TOKEN_PROVIDER}"
        conf["spark.jars"] = str(_copy_jar(TOKEN_PROVIDER, token, cache))
    answer.write_text(json.dumps(conf, indent=2))
    return conf
