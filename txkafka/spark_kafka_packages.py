"""Spark settings that load Spark's own ``kafka`` connector, for side-by-side comparisons.

Spark's connector is a set of JVM jars given at JVM start. The connector matching the installed
pyspark is preferred; where Maven cannot resolve it (a pyspark released before its connector), the
newest resolvable 4.x connector is used, and where its token-provider dependency is missing too, that
dependency is left out and the newest resolvable token provider jar is added instead (it only serves
delegation tokens, which the comparisons never use). Artifacts are looked up by name through
``mvn``, from the repositories Maven is configured with, as for the embedded broker's jars.

Maven copies the connector and its run-time dependencies into the txkafka cache, and Spark gets
them as ``spark.jars``, leaving out the jars Spark already ships. Spark's own resolver
(``spark.jars.packages``, Ivy) is not used: it looks in the local Maven repository before any
remote one and, finding a module's POM there without its jar (what a POM look-up or another
version's mediation leaves), fails instead of fetching the jar. The answer is cached; a cached
answer whose jars are gone is resolved again.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from .cache import cache_dir

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


_FETCH_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>txkafka.local</groupId><artifactId>spark-kafka-closure</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies><dependency>
    <groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version>
    <exclusions>{exclusions}</exclusions>
  </dependency></dependencies>
</project>
"""


def _artifact_name(jar_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``: the name without its version (the last
    part that starts with a digit, and any classifier after it)."""
    parts = jar_name.removesuffix(".jar").split("-")
    at = max((i for i, p in enumerate(parts) if i and p[:1].isdigit()), default=len(parts))
    return "-".join(parts[:at])


def _copy_closure(connector: str, exclude_token_provider: bool, folder: Path) -> list[Path]:
    """The connector's jar and its run-time dependencies' that Spark does not ship itself."""
    folder.mkdir(parents=True, exist_ok=True)
    exclusions = (f"<exclusion><groupId>{GROUP}</groupId><artifactId>{TOKEN_PROVIDER}</artifactId>"
                  "</exclusion>" if exclude_token_provider else "")
    pom = folder / "closure.pom.xml"
    pom.write_text(_FETCH_POM.format(group=GROUP, artifact=CONNECTOR, version=connector,
                                     exclusions=exclusions))
    got = _mvn("-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={folder}",
               "-DincludeScope=runtime")
    if got.returncode != 0:
        raise SparkKafkaPackageError(
            f"mvn could not fetch the jars of {GROUP}:{CONNECTOR}:{connector} and its "
            "dependencies:\n" + (got.stdout + got.stderr)[-2000:])
    shipped = spark_shipped_artifacts()
    return sorted(j for j in folder.glob("*.jar") if _artifact_name(j.name) not in shipped)


def spark_shipped_artifacts() -> set[str]:
    """The artifact names (without versions) of the jars the installed pyspark ships."""
    import pyspark

    return {_artifact_name(j.name) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def _jars(conf: dict[str, str]) -> list[Path]:
    return [Path(j) for j in conf.get("spark.jars", "").split(",") if j]


def builtin_kafka_conf(spark_version: str | None = None) -> dict[str, str]:
    """Spark conf entries that put Spark's built-in ``kafka`` format on the classpath."""
    import pyspark

    version = spark_version or pyspark.__version__
    cache = cache_dir() / "spark-kafka"
    cache.mkdir(parents=True, exist_ok=True)
    answer = cache / f"resolved-{version}.json"
    if answer.exists():
        conf = json.loads(answer.read_text())
        if _jars(conf) and all(j.is_file() for j in _jars(conf)):
            return conf
    connector = version if _resolvable(CONNECTOR, version) else _newest(CONNECTOR, version)
    if connector is None:
        raise SparkKafkaPackageError(f"Maven resolves no {GROUP}:{CONNECTOR} 4.x up to {version}")
    jars: list[Path] = []
    token_missing = not _resolvable(TOKEN_PROVIDER, connector)
    if token_missing:
        token = _newest(TOKEN_PROVIDER, connector)
        if token is None:
            raise SparkKafkaPackageError(f"Maven resolves no {GROUP}:{TOKEN_PROVIDER} up to {connector}")
        jars.append(_copy_jar(TOKEN_PROVIDER, token, cache))
    jars += _copy_closure(connector, token_missing, cache / f"jars-{connector}")
    conf = {"spark.jars": ",".join(str(j) for j in jars)}
    answer.write_text(json.dumps(conf, indent=2))
    return conf


def connector_jar(conf: dict[str, str]) -> str:
    """The connector's jar among ``conf``'s, by file name (for messages)."""
    return next((j.name for j in _jars(conf) if j.name.startswith(CONNECTOR)), "?")


AVRO = "spark-avro_2.13"


def builtin_kafka_and_avro_conf(spark_version: str | None = None) -> dict[str, str]:
    """``builtin_kafka_conf`` plus Spark's ``spark-avro`` package (``from_avro``/``to_avro``), of
    the installed Spark's version or the newest 4.x before it. Its Avro library ships with Spark."""
    import pyspark

    version = spark_version or pyspark.__version__
    conf = builtin_kafka_conf(version)
    avro = version if _resolvable(AVRO, version) else _newest(AVRO, version)
    if avro is None:
        raise SparkKafkaPackageError(f"Maven resolves no {GROUP}:{AVRO} 4.x up to {version}")
    jar = _copy_jar(AVRO, avro, cache_dir() / "spark-kafka")
    return {"spark.jars": ",".join([*conf["spark.jars"].split(","), str(jar)])}
