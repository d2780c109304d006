"""The progress line and the progress tab show pages per minute and an ETA."""

from __future__ import annotations

import pytest
from harvester.producer.progress import RunProgress, format_eta

pytestmark = pytest.mark.unit


def test_rate_and_eta_from_the_settled_pages() -> None:
    progress = RunProgress(source="shop", run_id="r1", packages_total=4, packages_finished=1, tasks_done=28,
                           tasks_failed=2, tasks_pending=90).estimate(elapsed_seconds=120)
    assert progress.pages_per_minute == 15 and progress.eta_seconds == 360
    assert progress.line().endswith("; 15 pages/min, ETA 6m00s")


def test_no_estimate_before_the_start_or_the_first_page() -> None:
    assert RunProgress(source="shop", run_id="r1").estimate(None).pages_per_minute is None
    waiting = RunProgress(source="shop", run_id="r1", packages_total=1, tasks_pending=5).estimate(30)
    assert waiting.pages_per_minute == 0 and waiting.eta_seconds is None and "ETA" not in waiting.line()
    done = RunProgress(source="shop", run_id="r1", packages_total=1, packages_finished=1, tasks_done=5).estimate(60)
    assert done.eta_seconds == 0 and done.line().endswith("5 pages/min, ETA 0s")


def test_format_eta() -> None:
    assert (format_eta(12.4), format_eta(250), format_eta(3720)) == ("12s", "4m10s", "1h02m")


def test_the_progress_line_and_the_runs_line_give_a_broad_runs_hosts() -> None:
    from harvester.producer.commands import _run_line

    hosts = {"hosts": 2000, "done": 1880, "waiting": 100, "in_flight": 8, "paused": 12, "unreachable": 9,
             "slowed": 3, "slowest": [{"host": "slow.example", "pages": 10, "mean_seconds": 8.2, "unreachable": 0}]}
    progress = RunProgress(source="shop", run_id="r1", packages_total=1, tasks_pending=5, hosts=hosts)
    assert progress.line().endswith("; hosts 1880/2000 done (12 paused)")
    line = _run_line({"run_id": "r1", "report": {"records_stored": 5, "hosts": hosts}})
    assert line.endswith(", hosts 1880/2000 done (slowest slow.example 8.2 s)")


def test_the_runs_line_of_a_reextraction_says_what_it_read() -> None:
    from harvester.producer.commands import _run_line

    line = _run_line({"run_id": "reextract-1", "status": "reported", "report": {
        "kind": "reextraction", "pages_read": 49, "records_stored": 23, "records_new": 0, "records_changed": 2,
        "tasks_failed": 1, "requests": 0, "duration_seconds": 0.8}})
    assert line.endswith("reported  re-extraction: 49 archived pages read, 23 records (0 new, 2 changed), 1 failed, "
                         "0 requests, 0.8 s"), line
