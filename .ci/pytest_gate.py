"""Run the test suite; "no tests collected" (pytest exit 5) is a failure, not a pass."""

import sys

import pytest

code = pytest.main(["-q", *sys.argv[1:]])
if code == pytest.ExitCode.NO_TESTS_COLLECTED:
    print("error: pytest collected no tests", file=sys.stderr)
    code = 1
sys.exit(int(code))
