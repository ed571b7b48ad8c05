"""The cache's "fetch or build once": one process makes a tool while another waits on the lock,
a failed or killed make leaves nothing that looks ready, and the layout stays what existing
caches have (a ``.complete`` marker holding the version; a binary renamed into place)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from txkafka.cache import cache_dir, made_once

_RACER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from txkafka.cache import made_once

    root = Path(sys.argv[1])

    def make():
        with open(root / "makes.log", "a") as fh:
            fh.write(sys.argv[2] + "\\n")
        (root / "started").touch()
        while not (root / "release").exists():  # the test lets it finish
            time.sleep(0.02)

    made = made_once(root / "tool" / ".complete", root / ".fetch-tool.lock", make,
                     what="fetching the tool", progress=lambda m: print(m, flush=True),
                     marker="1.0")
    print("made" if made else "was ready", flush=True)
""")


def _racer(root: Path, name: str) -> subprocess.Popen:
    (root / "tool").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-c", _RACER, str(root), name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_two_processes_one_makes_the_tool_the_other_waits_then_uses_it(tmp_path):
    first = _racer(tmp_path, "first")
    _wait_for(tmp_path / "started", first)  # first holds the lock, inside make()
    second = _racer(tmp_path, "second")
    assert second.stdout is not None
    told = second.stdout.readline()  # blocks until second finds the lock held
    assert told.startswith("waiting for another process to finish fetching the tool"), told
    assert not (tmp_path / "tool" / ".complete").exists()
    (tmp_path / "release").touch()
    out1, err1 = first.communicate(timeout=60)
    out2, err2 = second.communicate(timeout=60)
    assert first.returncode == 0 and second.returncode == 0, err1 + err2
    assert out1.splitlines() == ["made"] and out2.splitlines() == ["was ready"]
    assert (tmp_path / "makes.log").read_text().splitlines() == ["first"]  # made once
    assert (tmp_path / "tool" / ".complete").read_text() == "1.0"


def test_a_failed_make_leaves_nothing_ready_and_the_next_call_makes_it(tmp_path):
    ready, lock = tmp_path / "tool" / ".complete", tmp_path / ".lock"
    ready.parent.mkdir()

    def broken() -> None:
        raise OSError("network down")

    with pytest.raises(OSError):
        made_once(ready, lock, broken, what="fetching", marker="1.0")
    assert not ready.exists()
    calls = []
    assert made_once(ready, lock, lambda: calls.append(1), what="fetching", marker="1.0")
    assert calls == [1] and ready.read_text() == "1.0"
    assert not made_once(ready, lock, lambda: calls.append(2), what="fetching", marker="1.0")
    assert calls == [1]


def test_a_tool_that_is_its_own_marker_must_appear(tmp_path):
    binary, lock = tmp_path / "weed", tmp_path / ".build.lock"

    def build() -> None:
        partial = tmp_path / "weed.partial"
        partial.write_text("#!")
        partial.rename(binary)  # the last step, as the S3 server's build does

    assert made_once(binary, lock, build, what="building")
    with pytest.raises(RuntimeError, match="finished without"):
        made_once(tmp_path / "other", lock, lambda: None, what="building")


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TXKAFKA_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("TXKAFKA_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x" / "txkafka"
