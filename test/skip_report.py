"""A pytest plugin that writes every skipped test and its reason as JSON, for .ci/run's summary and check
(scripts/check_skips.py): registered by conftest.py when ``OXYGEN_SKIP_REPORT`` names the file to write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPORT_ENV = "OXYGEN_SKIP_REPORT"


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The reason pytest shows for a skip (``pytest.skip``, ``skipif``, a module-level skip) or an xfail."""
    if getattr(report, "wasxfail", None) is not None:
        return f"expected failure: {report.wasxfail}" if report.wasxfail else "expected failure"
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


class SkipRecorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.skipped: list[dict[str, str]] = []

    def _record(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if report.skipped:
            self.skipped.append({"test": report.nodeid, "reason": skip_reason(report)})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._record(report)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        report = {"exitstatus": int(exitstatus), "skipped": self.skipped}
        self.path.write_text(json.dumps(report, indent=1) + "\n")
