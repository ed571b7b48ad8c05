"""Spark settings that give a Spark query Hadoop's ``s3a`` filesystem (checkpoints on S3).

pyspark ships Hadoop's client jars but not ``hadoop-aws`` nor the AWS SDK it calls. Maven
resolves ``org.apache.hadoop:hadoop-aws`` at the version of the Hadoop client inside the
installed pyspark, with the AWS SDK v2 modules S3A uses (s3, s3-transfer-manager, sts,
apache-client and their dependencies) instead of the SDK's all-in-one ``bundle`` jar (hundreds
of megabytes). The jars are copied into the txkafka cache and handed to Spark as
``spark.jars``; jars Spark already ships are left out (the SDK's own never are: Spark ships
none, and some share a name with an unrelated jar Spark has, such as ``annotations``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .cache import cache_dir, file_lock
from .spark_kafka_packages import (SparkKafkaPackageError, _artifact_name, _mvn,
                                   spark_shipped_artifacts)

SDK_GROUP = "software.amazon.awssdk"
# The SDK modules S3A calls, besides what hadoop-aws itself declares.
SDK_MODULES = ("s3", "s3-transfer-manager", "sts", "apache-client")
# hadoop-project's property naming the AWS SDK v2 version hadoop-aws is built with.
_SDK_PROPERTY = "aws-java-sdk-v2.version"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>txkafka.local</groupId><artifactId>spark-s3a-closure</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-aws</artifactId>
      <version>{hadoop}</version>
      <exclusions><exclusion><groupId>{sdk}</groupId><artifactId>bundle</artifactId></exclusion>
      </exclusions></dependency>
{modules}  </dependencies>
</project>
"""
_MODULE = """    <dependency><groupId>{sdk}</groupId><artifactId>{name}</artifactId>
      <version>{version}</version>
      <exclusions><exclusion><groupId>{sdk}</groupId><artifactId>netty-nio-client</artifactId>
      </exclusion></exclusions></dependency>
"""
# "group:artifact:type[:classifier]:version:scope:/absolute/path.jar" (dependency:list)
_LISTED = re.compile(r"^\s*([\w.\-]+):([\w.\-]+):jar:(?:[\w.\-]+:)?([\w.\-]+):(compile|runtime)"
                     r":(/.+\.jar)")


def pyspark_hadoop_version() -> str:
    """The Hadoop version of the client jars inside the installed pyspark."""
    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not jars:
        raise SparkKafkaPackageError("the installed pyspark ships no hadoop-client-api jar, so "
                                     "the version of hadoop-aws to give Spark is unknown")
    return jars[-1].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def _sdk_version(hadoop: str, folder: Path) -> str:
    """The AWS SDK version hadoop-aws was built with (its parent POM's property): read from the
    POMs, since resolving hadoop-aws's dependencies would download the SDK's bundle jar."""
    got = _mvn("dependency:copy", f"-Dartifact=org.apache.hadoop:hadoop-aws:{hadoop}:pom",
               f"-DoutputDirectory={folder}")
    pom = folder / f"hadoop-aws-{hadoop}.pom"
    if got.returncode == 0 and pom.exists():
        got = _mvn("-f", str(pom), "help:evaluate", f"-Dexpression={_SDK_PROPERTY}",
                   "-DforceStdout")
    plain = re.sub(r"\x1b\[[0-9;]*m", "", got.stdout)  # Maven's colours
    found = re.search(r"\b(2\.\d+\.\d+)\b", plain) if got.returncode == 0 else None
    if not found:
        raise SparkKafkaPackageError(
            f"mvn could not read the AWS SDK version ({_SDK_PROPERTY}) of "
            f"org.apache.hadoop:hadoop-aws:{hadoop}:\n" + (got.stdout + got.stderr)[-2000:])
    return found.group(1)


def s3a_conf(hadoop: str | None = None) -> dict[str, str]:
    """Spark conf entries (``spark.jars``) that put Hadoop's s3a filesystem on the classpath.
    Resolved once per Hadoop version and cached; a cached answer whose jars are gone is
    resolved again."""
    version = hadoop or pyspark_hadoop_version()
    cache = cache_dir() / "spark-s3a"
    cache.mkdir(parents=True, exist_ok=True)
    answer = cache / f"resolved-{version}.json"
    with file_lock(cache / f".resolve-{version}.lock"):
        if answer.exists():
            conf = json.loads(answer.read_text())
            jars = [Path(j) for j in conf.get("spark.jars", "").split(",") if j]
            if jars and all(j.is_file() for j in jars):
                return conf
        folder = cache / f"jars-{version}"
        folder.mkdir(parents=True, exist_ok=True)
        sdk = _sdk_version(version, cache)
        pom = cache / f"closure-{version}.pom.xml"
        pom.write_text(_POM.format(hadoop=version, sdk=SDK_GROUP, modules="".join(
            _MODULE.format(sdk=SDK_GROUP, name=m, version=sdk) for m in SDK_MODULES)))
        listing = cache / f"closure-{version}.txt"
        got = _mvn("-f", str(pom), "dependency:list", f"-DoutputFile={listing}",
                   "-DincludeScope=runtime", "-DoutputAbsoluteArtifactFilename=true")
        if got.returncode != 0 or not listing.exists():
            raise SparkKafkaPackageError(
                f"mvn could not fetch hadoop-aws {version} and the AWS SDK {sdk} modules "
                f"{', '.join(SDK_MODULES)}:\n" + (got.stdout + got.stderr)[-2000:])
        shipped = spark_shipped_artifacts()
        jars = []
        for line in listing.read_text().splitlines():
            m = _LISTED.match(line)
            if not m:
                continue
            group, artifact, src = m.group(1), m.group(2), Path(m.group(5))
            if group != SDK_GROUP and _artifact_name(src.name) in shipped:
                continue
            # The SDK's jars have short names (utils, auth, regions): keep them apart.
            dest = folder / (f"awssdk-{src.name}" if group == SDK_GROUP else src.name)
            if not dest.exists():
                dest.write_bytes(src.read_bytes())
            jars.append(dest)
        if not any(j.name.startswith("hadoop-aws-") for j in jars):
            raise SparkKafkaPackageError(f"mvn listed no hadoop-aws jar for Hadoop {version}:\n"
                                         + listing.read_text()[-2000:])
        conf = {"spark.jars": ",".join(str(j) for j in sorted(jars))}
        answer.write_text(json.dumps(conf, indent=2))
        return conf


def s3a_settings(endpoint: str, access_key: str, secret_key: str, *,
                 region: str = "us-east-1", path_style: bool = True) -> dict[str, str]:
    """``spark.hadoop.fs.s3a.*`` entries for an S3-compatible endpoint with static keys."""
    return {
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": region,
        "spark.hadoop.fs.s3a.path.style.access": str(path_style).lower(),
        "spark.hadoop.fs.s3a.access.key": access_key,
        "spark.hadoop.fs.s3a.secret.key": secret_key,
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
        "spark.hadoop.fs.s3a.aws.credentials.provider":
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
