"""A real S3-compatible server (SeaweedFS) on 127.0.0.1, built from its Go module, for tests.

Why: object-store checkpoints are tested against a real S3 server, never a stand-in, and the
project's machines have no Docker. SeaweedFS (Apache-2.0) is a Go program published as a Go
module; ``go install`` refuses it (its go.mod has replace directives), so its source is
downloaded with ``go mod download`` at a pinned version, copied out of the read-only module cache
and built with ``go build`` once. The binary is cached under the txkafka cache, keyed by
version, behind a file lock: CI starts the build early (``python -m txkafka.embedded_s3 build``)
and the test fixture waits on the same lock.

The server runs with an identity (access key and secret) so requests are signed and checked,
and answers path-style requests on one port.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .cache import Progress, cache_dir, made_once
from .embedded_kafka import free_ports

SEAWEEDFS_MODULE = "github.com/seaweedfs/seaweedfs"
# SeaweedFS 4.53 (its go.mod needs Go 1.26.6). It refuses a second PutObject with
# ``If-None-Match: *`` atomically (a lock around the re-check and the create, since 4.17).
SEAWEEDFS_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
REGION = "us-east-1"
_BUILD_TIMEOUT_S = 3600


class EmbeddedS3Error(RuntimeError):
    """The S3 server could not be built or started; the message carries the log tail."""


def _stderr_progress(msg: str) -> None:
    print(f"[txkafka s3] {msg}", file=sys.stderr, flush=True)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise EmbeddedS3Error(
            "Go ('go', 1.26 or newer) is needed to build the S3 server (SeaweedFS) the object-store "
            "checkpoint tests run against; install Go (README.md, prerequisites) and run again")
    return go


def weed_binary(progress: Progress = _stderr_progress, version: str = SEAWEEDFS_VERSION) -> Path:
    """The SeaweedFS ``weed`` binary, built from its Go module the first time (several minutes
    cold; the Go build cache makes a rebuild short)."""
    home = cache_dir() / f"seaweedfs-{version}"
    binary = home / "weed"

    def build() -> None:
        go = _go()
        home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
        started = time.monotonic()
        progress(f"downloading SeaweedFS {version} with `go mod download` (once)")
        with tempfile.TemporaryDirectory(prefix="txkafka-go-") as empty:
            got = subprocess.run([go, "mod", "download", "-json", f"{SEAWEEDFS_MODULE}@{version}"],
                                 cwd=empty, env=env, capture_output=True, text=True, timeout=900)
        try:
            module_dir = Path(json.loads(got.stdout)["Dir"])
        except (ValueError, KeyError, TypeError):
            raise EmbeddedS3Error(f"`go mod download {SEAWEEDFS_MODULE}@{version}` failed:\n"
                                  + (got.stdout + got.stderr)[-2000:]) from None
        src = home / "src"
        if src.exists():
            shutil.rmtree(src)
        # The module cache is read-only; go build writes nothing there, but go.sum may change.
        shutil.copytree(module_dir, src)
        for d, _, files in os.walk(src):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        progress("building SeaweedFS's `weed` with `go build` (once: about 7 minutes on 2 cores "
                 "without Go's build cache, under 2 with it)")
        partial = home / "weed.partial"
        proc = subprocess.Popen([go, "build", "-v", "-o", str(partial), "./weed"], cwd=src,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        tail: list[str] = []
        built = 0
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-40:]
            built += 1
            if built % 200 == 0:
                progress(f"  {built} packages compiled ({time.monotonic() - started:.0f}s)")
        if proc.wait(timeout=_BUILD_TIMEOUT_S) != 0 or not partial.is_file():
            raise EmbeddedS3Error("`go build ./weed` failed:\n" + "\n".join(tail))
        partial.rename(binary)
        shutil.rmtree(src, ignore_errors=True)
        progress(f"SeaweedFS built in {time.monotonic() - started:.0f}s: {binary}")

    # The binary is the ready marker: renamed into place as the build's last step.
    made_once(binary, cache_dir() / f".build-seaweedfs-{version}.lock", build,
              what=f"building SeaweedFS {version}", progress=progress)
    return binary


class EmbeddedS3:
    """One SeaweedFS process (master, volume, filer and S3 gateway) on loopback ports."""

    def __init__(self, root: Path, *, progress: Progress = _stderr_progress) -> None:
        self.root = Path(root)
        self.progress = progress
        self.access_key = "txkafka" + secrets.token_hex(4)
        self.secret_key = secrets.token_hex(20)
        self.port = 0
        self.proc: subprocess.Popen | None = None

    def __repr__(self) -> str:
        return f"EmbeddedS3(endpoint={self.endpoint!r})"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "weed.log"

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join([f"--- {self.log_path} (last {lines} lines) ---", *text])

    def start(self, timeout: float = 120.0) -> str:
        """Start the server and wait until it answers a signed request; returns the endpoint."""
        binary = weed_binary(self.progress)
        self.stop()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "data").mkdir(exist_ok=True)
        config = self.root / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "txkafka",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        config.chmod(0o600)
        ports = free_ports(8)
        self.port = ports[0]
        cmd = [str(binary), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
               f"-dir={self.root / 'data'}", "-s3", f"-s3.port={ports[0]}",
               f"-s3.port.grpc={ports[1]}", f"-s3.config={config}",
               f"-master.port={ports[2]}", f"-master.port.grpc={ports[3]}",
               f"-volume.port={ports[4]}", f"-volume.port.grpc={ports[5]}",
               f"-filer.port={ports[6]}", f"-filer.port.grpc={ports[7]}",
               # Listeners on by default that the tests do not use: off (no fixed ports).
               "-s3.port.iceberg=0", "-s3.port.lance=0",
               "-master.volumeSizeLimitMB=64", "-volume.max=32"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EmbeddedS3Error(f"SeaweedFS exited during start-up (code "
                                      f"{self.proc.returncode})\n{self.log_tail()}")
            try:
                self.client().list_buckets()
                return self.endpoint
            except Exception as e:  # noqa: BLE001 - any failure means "not ready yet"
                last = e
                time.sleep(0.5)
        self.stop()
        raise EmbeddedS3Error(f"SeaweedFS did not answer S3 requests on {self.endpoint} within "
                              f"{timeout:.0f}s ({type(last).__name__}: {last})\n{self.log_tail()}")

    def settings(self) -> dict[str, str]:
        """The sink's (and Hadoop's s3a) option names and values that reach this server."""
        return {"fs.s3a.endpoint": self.endpoint, "fs.s3a.access.key": self.access_key,
                "fs.s3a.secret.key": self.secret_key, "fs.s3a.path.style.access": "true",
                "fs.s3a.endpoint.region": REGION}

    def environment(self) -> dict[str, str]:
        """The standard AWS environment variables that reach this server."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": REGION}

    def client(self) -> Any:
        """A botocore S3 client signed with this server's identity."""
        import botocore.session
        from botocore.config import Config

        return botocore.session.get_session().create_client(
            "s3", endpoint_url=self.endpoint, region_name=REGION,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                          connect_timeout=2, read_timeout=10))

    def create_bucket(self, name: str) -> str:
        """A bucket (3 characters or more); returns its name."""
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s). Safe when nothing runs."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def destroy(self) -> None:
        """Stop the server at once (no clean shutdown: the data is going anyway) and delete it."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "EmbeddedS3":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def main(argv: list[str] | None = None) -> int:
    """``python -m txkafka.embedded_s3 build``: build (or find) the cached binary (CI runs it in
    the background at its start, so the tests find it built)."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["build"]:
        print("usage: python -m txkafka.embedded_s3 build", file=sys.stderr)
        return 2
    try:
        print(weed_binary())
    except EmbeddedS3Error as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
