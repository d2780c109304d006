"""The batch pipeline records each run's fetches per site host: a source over several hosts (the demo site by
two names, and a port that refuses) gives its run's host figures, the unreachable host's fetches counted as such
(real Redis, MongoDB, the demo site and the batch runner)."""

from __future__ import annotations

import pytest
from harvester.distributor import TaskMessage, host_of
from harvester.redis_keys import SourceKeys
from harvester.storage import RunHosts

pytestmark = pytest.mark.integration


def test_a_batch_over_several_hosts_adds_to_its_runs_host_figures(write_source, crawl, demo_site,
                                                                  redis_client) -> None:
    source = write_source("several_hosts", rate_limit={"max_active": 8, "per_minute": 1000}, robots="ignore",
                          retries=0)
    other_name = demo_site.url.replace("127.0.0.1", "localhost")
    urls = [f"{demo_site.url}/product/1", f"{demo_site.url}/product/2", f"{other_name}/product/3",
            "http://127.0.0.1:1/product/4"]  # nothing listens on port 1: refused, host_unreachable
    crawl.push(source, *(TaskMessage(source=source.name, url=url, run_id="run-h") for url in urls))
    crawl.step(source)

    assert redis_client.get(SourceKeys(source.name).hosts_run) == b"run-h"  # the run the metrics read
    figures = RunHosts(redis_client).read(source.name, "run-h")
    assert figures.hosts == 3
    pages = {entry["host"]: entry for entry in figures.slowest}
    assert pages[host_of(urls[0])]["pages"] == 2 and pages[host_of(urls[2])]["pages"] == 1
    assert pages["127.0.0.1:1"]["unreachable"] == 1
    assert figures.done == 3  # nothing of the run queued, in flight or paused
