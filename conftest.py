"""Repository-wide pytest configuration.

* The kubesim fixtures (`kubesim`, `kubesim_module`, `kubeconfig_env`) are available to
  every test directory.
* No silent skips: a test may skip only for what a machine can genuinely lack (a GPU), with
  a reason that starts with ``machine:`` (e.g. ``pytest.skip("machine: no NVIDIA GPU")``).
  Any other skip -- a missing tool, package or file that ``make setup`` or the repository
  provides, an empty parameter list -- is reported as a failure.
"""
import pytest

pytest_plugins = ["kubesim.pytest_plugin"]

MACHINE_SKIP_PREFIX = "machine:"


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_unjustified_skip(report) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if reason.startswith(MACHINE_SKIP_PREFIX):
        return
    report.outcome = "failed"
    report.longrepr = (f"skipped without a machine reason: {reason!r}. A skip is allowed only "
                       f"for what a machine can lack (reason starting with "
                       f"{MACHINE_SKIP_PREFIX!r}); anything `make setup` installs is required.")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_unjustified_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_unjustified_skip(outcome.get_result())
