"""Run the test suite; "no tests collected" (pytest exit 5) is a failure, not a pass.

The suite runs on two xdist workers, a test file at a time on one worker (``--dist loadfile``:
the chaos campaigns and the summary test after them stay together, in order). The tests' drivers
spend much of their time waiting on Spark and Kafka, so two streams share the machine's two cores
well. ``-n 0`` (or another ``-n``) in the arguments overrides this.
"""

import sys

import pytest

args = sys.argv[1:]
if not any(a.startswith(("-n", "--numprocesses", "--dist")) for a in args):
    args = ["-n", "2", "--dist", "loadfile", *args]
code = pytest.main(["-q", *args])
if code == pytest.ExitCode.NO_TESTS_COLLECTED:
    print("error: pytest collected no tests", file=sys.stderr)
    code = 1
sys.exit(int(code))
