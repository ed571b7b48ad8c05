"""The demo's crash step: only a real SIGKILL that left the batch half committed counts, and the
pipeline's session never outlives the demo."""

import signal
import subprocess
import sys
import time

import pytest

from txkafka import demo


def test_crash_verdict_accepts_only_a_kill_leaving_open_transactions():
    assert demo.crash_verdict(-signal.SIGKILL, True, 2) is None
    assert "not injected" in demo.crash_verdict(0, False, 0)
    assert "exited with 0" in demo.crash_verdict(0, True, 2)  # fault fired, driver lived on
    assert "exited with 2" in demo.crash_verdict(2, True, 2)
    assert "not half committed" in demo.crash_verdict(-signal.SIGKILL, True, 0)


def test_kill_session_reaches_processes_in_other_groups():
    # A session leader with a child in a process group of its own, as PySpark's workers are.
    code = ("import os, subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
            " process_group=0)\n"
            "print(c.pid, flush=True)\n"
            "time.sleep(60)\n")
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              start_new_session=True, text=True)
    child = int(leader.stdout.readline())
    demo._kill_session(leader.pid)
    assert leader.wait(10) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as fh:
                if fh.read().split(")")[-1].split()[0] == "Z":
                    break  # dead, waiting for init to reap it
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"process {child} of the killed session is still running")


def test_an_interrupted_demo_kills_the_pipeline(monkeypatch, tmp_path):
    started = []
    real_popen = subprocess.Popen

    def fake_pipeline(cmd, **kw):
        script = "import time; print('BATCH 0', flush=True); time.sleep(60)"
        p = real_popen([sys.executable, "-c", script], **kw)
        started.append(p)
        return p

    def interrupted(msg):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo.subprocess, "Popen", fake_pipeline)
    monkeypatch.setattr(demo, "say", interrupted)
    with pytest.raises(KeyboardInterrupt):
        demo._run_pipeline([], str(tmp_path / "log"))
    assert started[0].poll() == -signal.SIGKILL
