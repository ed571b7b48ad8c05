"""Test-session set-up shared by tests/ and integration_tests/.

Fault injection is armed only from the environment (connector/fault_injection.py): each test
process (every xdist worker its own) names a file of its own before any Spark starts, so the JVM and
every Python worker it launches read the rules a test arms with ``arm()``/``armed()``.

Under CI=true (``.ci/run``) a test that did not run as written fails the run: a skip (at collection,
e.g. a module-level ``pytest.skip`` or ``importorskip``, or at setup or in the test), an xfail or
an xpass. A skip there would hide exactly the missing broker, Spark or platform feature the suite
exists to catch. Locally they are reported as usual.
"""

import atexit
import os
import tempfile

import pytest

from txkafka.connector.fault_injection import FILE_ENV_VAR, disarm

os.environ[FILE_ENV_VAR] = os.path.join(tempfile.gettempdir(),
                                        f"txkafka-faults-{os.getpid()}.spec")
open(os.environ[FILE_ENV_VAR], "w").close()
atexit.register(lambda path=os.environ[FILE_ENV_VAR]: os.path.exists(path) and os.remove(path))


IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_CI_FAILS = "in CI (CI=true) this fails the run"


def _skip_reason(report) -> str:
    # A skip's longrepr is (file, line, "Skipped: reason").
    r = report.longrepr
    return f"{r[0]}:{r[1]}: {r[2]}" if isinstance(r, tuple) and len(r) == 3 else str(r)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """(outermost: after pytest's own xfail handling) Under CI=true a skip, xfail or xpass fails."""
    report = (yield).get_result()
    if not IN_CI:
        return
    if hasattr(report, "wasxfail"):
        what = "xfailed" if report.skipped else "xpassed"
        report.outcome = "failed"
        report.longrepr = f"{what} ({report.wasxfail or 'no reason given'}): {_CI_FAILS}"
        del report.wasxfail  # reported as the failure it now is, not as an xfail
    elif report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped ({_skip_reason(report)}): {_CI_FAILS}"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_make_collect_report(collector):
    """Under CI=true a module or class skipped while being collected fails."""
    report = (yield).get_result()
    if IN_CI and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped at collection ({_skip_reason(report)}): {_CI_FAILS}"


@pytest.fixture(autouse=True)
def _faults_disarmed_after_each_test():
    """What a test arms ends with it (an injector a committer already holds keeps its rules)."""
    yield
    disarm()
