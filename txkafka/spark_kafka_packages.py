"""Spark settings that load Spark's own ``kafka`` connector, for side-by-side comparisons.

Spark's connector is a JVM package set at JVM start (``spark.jars.packages``). The one matching the
installed pyspark is preferred; where Maven Central (as reachable) lacks it, the newest resolvable
4.x connector is used, and where its token-provider dependency is missing too, that dependency is
excluded and the newest published token provider jar is added instead (it only serves delegation
tokens, which the comparisons never use). Answers are cached in the txkafka cache folder.
"""

from __future__ import annotations

import json
import urllib.request

from .embedded_kafka import cache_dir

GROUP = "org.apache.spark"
CONNECTOR = "spark-sql-kafka-0-10_2.13"
TOKEN_PROVIDER = "spark-token-provider-kafka-0-10_2.13"
_CANDIDATES = ("4.3.1", "4.3.0", "4.2.1", "4.2.0", "4.1.1", "4.1.0", "4.0.1", "4.0.0")


CENTRAL = "https://repo1.maven.org/maven2"


def _url(artifact_id: str, version: str, ext: str) -> str:
    return f"{CENTRAL}/{GROUP.replace('.', '/')}/{artifact_id}/{version}/{artifact_id}-{version}.{ext}"


def _published(artifact_id: str, version: str) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(_url(artifact_id, version, "pom"),
                                                           method="HEAD"), timeout=30) as r:
            return r.status == 200
    except OSError:  # urllib's HTTPError and URLError are OSErrors
        return False


def _newest(artifact_id: str, upto: str) -> str | None:
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))

    for v in _CANDIDATES:
        if key(v) <= key(upto) and _published(artifact_id, v):
            return v
    return None


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
    connector = version if _published(CONNECTOR, version) else _newest(CONNECTOR, version)
    if connector is None:
        raise RuntimeError(f"no {GROUP}:{CONNECTOR} 4.x can be resolved from Maven Central")
    conf["spark.jars.packages"] = f"{GROUP}:{CONNECTOR}:{connector}"
    if not _published(TOKEN_PROVIDER, connector):
        token = _newest(TOKEN_PROVIDER, connector)
        if token is None:
            raise RuntimeError(f"no {GROUP}:{TOKEN_PROVIDER} can be resolved from Maven Central")
        jar = cache / f"{TOKEN_PROVIDER}-{token}.jar"
        if not jar.exists():
            tmp = jar.with_suffix(".part")
            with urllib.request.urlopen(_url(TOKEN_PROVIDER, token, "jar"), timeout=120) as r:
                tmp.write_bytes(r.read())
            tmp.replace(jar)
        conf["spark.jars.excludes"] = f"{GROUP}:{TOKEN_PROVIDER}"
        conf["spark.jars"] = str(jar)
    answer.write_text(json.dumps(conf, indent=2))
    return conf
