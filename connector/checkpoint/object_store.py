"""Object-store checkpoints: the S3 settings of the sink's own file access, and exclusive creates.

Owns: the sink's S3 endpoint and credentials (Hadoop's ``fs.s3a.*`` option names, else the
standard AWS environment and credential chain), the pyarrow filesystem built from them, and the
creation of a commit-log record that the store itself refuses to a second writer (PutObject with
``If-None-Match: *``, conditional writes). pyarrow's S3 filesystem cannot send that header, so
those creates go through botocore (the ``s3`` extra); everything else goes through pyarrow.

Whether a store honours the header is probed once per process and bucket: a probe object is
created twice with the header, and a store that accepts the second create ignores it (the caller
falls back to a check before the write and a read-back). Imports pyarrow; botocore when used.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from ..errors import CheckpointStoreError, KafkaConfigError
from ..secrets_redaction import redact_uri

log = logging.getLogger("txkafka.checkpoint")

S3_SCHEMES = ("s3", "s3a", "s3n")
# Hadoop's s3a names, accepted as the writer's options (one spelling each, case-insensitive).
ENDPOINT = "fs.s3a.endpoint"
REGION = "fs.s3a.endpoint.region"
ACCESS_KEY = "fs.s3a.access.key"
SECRET_KEY = "fs.s3a.secret.key"
SESSION_TOKEN = "fs.s3a.session.token"
PATH_STYLE = "fs.s3a.path.style.access"
S3_OPTIONS: tuple[str, ...] = (ENDPOINT, REGION, ACCESS_KEY, SECRET_KEY, SESSION_TOKEN, PATH_STYLE)
SPARK_HADOOP = "spark.hadoop."
# A Spark user's spelling of the same settings (spark-submit --conf, spark-defaults.conf).
SPARK_S3A_PREFIX = SPARK_HADOOP + "fs.s3a."
SPARK_S3A_SETTINGS: tuple[str, ...] = tuple(SPARK_HADOOP + n for n in S3_OPTIONS)
_EXTRA = "txkafka[s3]"
_PROBE_DIR = ".txkafka-probe"
# A store's answers to a conditional create that lost: 412 (the name exists) and 409 (a
# concurrent create or delete of that name is in flight).
_REFUSED = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
_AUTH = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken",
         "ExpiredToken", "InvalidClientTokenId", "403", "AuthorizationHeaderMalformed"}


def _get(options: Mapping[str, Any], name: str) -> str | None:
    low = name.lower()
    for k, v in options.items():
        if str(k).lower() in (low, SPARK_HADOOP + low) and v is not None:
            return str(v)
    return None


@dataclass(frozen=True)
class S3Settings:
    """The sink's S3 endpoint and credentials; each unset field falls back to the AWS
    environment variables and the standard credential chain (profile, web identity, instance)."""

    endpoint: str | None = None
    region: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    path_style: bool | None = None
    # Where the endpoint came from, for messages ("option fs.s3a.endpoint", "AWS_ENDPOINT_URL").
    endpoint_from: str = "the AWS default"
    keys_from: str = "the AWS credential chain (environment, profile, instance role)"

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None = None,
                     environ: Mapping[str, str] | None = None) -> "S3Settings":
        """Hadoop's ``fs.s3a.*`` names (also as ``spark.hadoop.fs.s3a.*``) from ``options``, then
        the AWS environment variables. Both keys or neither: one alone fails."""
        options = options or {}
        env = os.environ if environ is None else environ
        endpoint, endpoint_from = _get(options, ENDPOINT), f"option '{ENDPOINT}'"
        for var in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
            if not endpoint and env.get(var):
                endpoint, endpoint_from = env[var], f"environment variable {var}"
        if endpoint and "://" not in endpoint:
            endpoint = "https://" + endpoint  # Hadoop's default scheme for a bare host
        if endpoint:
            parts = urlsplit(endpoint)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise KafkaConfigError(
                    f"{endpoint_from} must be an http:// or https:// URL or a host[:port], got "
                    f"{redact_uri(endpoint)!r}")
        access, secret = _get(options, ACCESS_KEY), _get(options, SECRET_KEY)
        if (access is None) != (secret is None):
            given, missing = (ACCESS_KEY, SECRET_KEY) if secret is None else (SECRET_KEY, ACCESS_KEY)
            raise KafkaConfigError(
                f"option '{given}' is set without '{missing}': give both (an S3 access key and its "
                "secret), or neither to use the AWS credential chain")
        raw_style = _get(options, PATH_STYLE)
        path_style = None
        if raw_style is not None:
            if raw_style.strip().lower() not in ("true", "false"):
                raise KafkaConfigError(f"option '{PATH_STYLE}' must be true or false, got "
                                       f"{raw_style!r}")
            path_style = raw_style.strip().lower() == "true"
        region = _get(options, REGION) or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        return cls(endpoint=endpoint or None, region=region or None, access_key=access,
                   secret_key=secret, session_token=_get(options, SESSION_TOKEN),
                   path_style=path_style,
                   endpoint_from=endpoint_from if endpoint else cls.endpoint_from,
                   keys_from=f"options '{ACCESS_KEY}'/'{SECRET_KEY}'" if access else cls.keys_from)

    @property
    def given(self) -> bool:
        """Whether anything differs from pyarrow's own defaults (the URI alone then suffices)."""
        return any(v is not None for v in (self.endpoint, self.region, self.access_key,
                                           self.session_token, self.path_style))

    @property
    def shown_endpoint(self) -> str:
        return f"{redact_uri(self.endpoint)} ({self.endpoint_from})" if self.endpoint else "AWS S3"

    def filesystem(self) -> pafs.S3FileSystem:
        """pyarrow's S3 filesystem with these settings."""
        kw: dict[str, Any] = {"region": self.region or "us-east-1", "connect_timeout": 5,
                              "request_timeout": 30}
        if self.endpoint:
            parts = urlsplit(self.endpoint)
            kw["scheme"] = parts.scheme
            kw["endpoint_override"] = parts.netloc
        if self.access_key:
            kw.update(access_key=self.access_key, secret_key=self.secret_key,
                      session_token=self.session_token)
        if self.path_style is False:
            kw["force_virtual_addressing"] = True
        return pafs.S3FileSystem(**kw)

    def client(self) -> Any:
        """A botocore S3 client with these settings (CheckpointStoreError naming the extra when
        botocore is not installed)."""
        try:
            import botocore.session
            from botocore.config import Config
        except ImportError:
            raise CheckpointStoreError(
                "a checkpoint on S3 needs botocore, which creates the sink's commit-log records "
                f"with conditional writes: pip install '{_EXTRA}'") from None
        style = "path" if self.path_style in (None, True) and self.endpoint else "auto"
        if self.path_style is False:
            style = "virtual"
        return botocore.session.get_session().create_client(
            "s3", endpoint_url=self.endpoint, region_name=self.region or "us-east-1",
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            aws_session_token=self.session_token,
            config=Config(s3={"addressing_style": style}, connect_timeout=5, read_timeout=30,
                          retries={"max_attempts": 3, "mode": "standard"}))


def s3_options(spark: Any) -> dict[str, str]:
    """The writer options of an S3 checkpoint copied from a SparkSession's ``spark.hadoop.fs.s3a.*``
    settings: Spark reads the checkpoint with them, but the sink's own access runs in Python
    processes without the session. ``df.writeStream.options(**s3_options(spark))``."""
    out: dict[str, str] = {}
    for name in S3_OPTIONS:
        value = spark.conf.get(SPARK_HADOOP + name, None)
        if value:
            out[name] = value
    return out


def s3_option_of_spark_setting(key: str) -> str | None:
    """The writer option (``fs.s3a.endpoint``) of a Spark setting (``spark.hadoop.fs.s3a.endpoint``,
    case-insensitive), None for a setting the sink's own access does not use."""
    low = key.strip().lower()
    return next((n for n in S3_OPTIONS if low == SPARK_HADOOP + n), None)


def is_s3(location: str) -> bool:
    return location.partition("://")[0].lower() in S3_SCHEMES and "://" in location


def _code(e: Exception) -> str:
    response = getattr(e, "response", None) or {}
    err = response.get("Error", {}) if isinstance(response, dict) else {}
    return str(err.get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


class ExclusiveS3:
    """Creates objects that the store refuses to a second writer, where it supports that."""

    # (endpoint, bucket) -> whether the store honours If-None-Match: probed once per process.
    _support: dict[tuple[str, str], bool] = {}
    _lock = threading.Lock()

    def __init__(self, settings: S3Settings, location: str) -> None:
        self.settings = settings
        self.location = location
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.settings.client()
        return self._client

    def _refusal(self, e: Exception, what: str) -> CheckpointStoreError:
        """A store error as the checkpoint's, naming what was refused and never a secret."""
        code = _code(e) or type(e).__name__
        where = (f"checkpoint {redact_uri(self.location)!r} at "
                 f"{self.settings.shown_endpoint}")
        if code in _AUTH:
            hint = (f"the store refused the credentials from {self.settings.keys_from} ({code}); "
                    f"give a valid access key and secret ('{ACCESS_KEY}'/'{SECRET_KEY}' options, or "
                    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) that may read and write the bucket")
        elif code in ("NoSuchBucket", "404"):
            hint = ("its bucket does not exist there: create it, or set the endpoint "
                    f"('{ENDPOINT}' or AWS_ENDPOINT_URL) of the store that holds it")
        elif "Could not connect" in str(e) or "Connect timeout" in str(e) or "EndpointConnection" \
                in type(e).__name__:
            hint = (f"the endpoint does not answer; set '{ENDPOINT}' (or AWS_ENDPOINT_URL) to the "
                    "store's URL")
        elif "NoCredentials" in type(e).__name__:
            hint = (f"no credentials were found: set the options '{ACCESS_KEY}' and '{SECRET_KEY}', "
                    "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or an AWS profile or role")
        else:
            hint = f"the store answered {code}"
        return CheckpointStoreError(f"cannot {what} the {where}: {hint}")

    def check(self, bucket: str) -> bool:
        """Fail (CheckpointStoreError) unless the bucket is there and these credentials are let
        in; then whether the store creates records exclusively (:meth:`supported`)."""
        try:
            # A bucket of its own: some stores create a bucket that a write names.
            self.client.head_bucket(Bucket=bucket)
        except Exception as e:  # noqa: BLE001 - botocore raises several types
            raise self._refusal(e, "open") from None
        return self.supported(bucket)

    def supported(self, bucket: str) -> bool:
        """Whether the store refuses a second create with ``If-None-Match: *`` (probed once)."""
        key = (self.settings.endpoint or "aws", bucket)
        with self._lock:
            if key not in self._support:
                self._support[key] = self._probe(bucket)
            return self._support[key]

    def _probe(self, bucket: str) -> bool:
        probe = f"{_PROBE_DIR}/{uuid.uuid4().hex}"
        try:
            self.client.put_object(Bucket=bucket, Key=probe, Body=b"1", IfNoneMatch="*")
        except Exception as e:  # noqa: BLE001 - botocore raises several types
            if _code(e) == "NotImplemented":
                return False
            raise self._refusal(e, "write to") from None
        try:
            self.client.put_object(Bucket=bucket, Key=probe, Body=b"2", IfNoneMatch="*")
            honoured = False
        except Exception as e:  # noqa: BLE001
            if _code(e) not in _REFUSED:
                raise self._refusal(e, "write to") from None
            honoured = True
        try:
            self.client.delete_object(Bucket=bucket, Key=probe)
        except Exception:  # noqa: BLE001 - a leftover probe object is harmless
            pass
        if not honoured:
            log.warning("the S3 store at %s ignores conditional writes (If-None-Match): the "
                        "sink's commit-log records on %s are made exclusive by a check before "
                        "the write and a read-back only", self.settings.shown_endpoint,
                        redact_uri(self.location))
        return honoured

    def create(self, path: str, data: bytes, taken: Any) -> bool:
        """Create ``path`` (``bucket/key``) unless it exists; False when the store does not
        support conditional writes (the caller falls back). ``taken(path)``: the error to raise
        when the store refuses because another writer created it."""
        bucket, _, key = path.partition("/")
        if not self.supported(bucket):
            return False
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except Exception as e:  # noqa: BLE001
            if _code(e) in _REFUSED:
                raise taken(path) from None
            raise self._refusal(e, "write a record to") from None
        return True


def s3_bucket_path(location: str) -> str:
    """``s3a://bucket/a/b`` -> ``bucket/a/b`` (pyarrow's path form)."""
    rest = location.partition("://")[2]
    return rest.split("?", 1)[0].rstrip("/")

