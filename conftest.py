"""Test-session set-up shared by tests/ and integration_tests/.

Fault injection is armed only from the environment (connector/fault_injection.py): each test
process (every xdist worker its own) names a file of its own before any Spark starts, so the JVM and
every Python worker it launches read the rules a test arms with ``arm()``/``armed()``.
"""

import os
import tempfile

import pytest

from txkafka.connector.fault_injection import FILE_ENV_VAR, disarm

os.environ[FILE_ENV_VAR] = os.path.join(tempfile.gettempdir(),
                                        f"txkafka-faults-{os.getpid()}.spec")
open(os.environ[FILE_ENV_VAR], "w").close()


@pytest.fixture(autouse=True)
def _faults_disarmed_after_each_test():
    """What a test arms ends with it (an injector a committer already holds keeps its rules)."""
    yield
    disarm()
