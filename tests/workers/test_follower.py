"""The link follower against real Redis (and MongoDB where a package takes the discovered tasks)."""

from __future__ import annotations

import pytest
from harvester.distributor import Intake, TaskMessage
from harvester.redis_keys import SourceKeys
from harvester.scraping.discovery.links import Discovery
from harvester.scraping.fetching.fetcher import FetchResult
from harvester.scraping.page import PageResult
from harvester.settings import HarvesterSettings
from harvester.storage.data_handler import DataHandler
from harvester.storage.packages import PackageStore, PackageTask, planned_task_id
from harvester.storage.url_store import RunFrontier, URLStore
from harvester.workers.clients import WorkerClients
from harvester.workers.follower import LinkFollower, discovered_task_id
from harvester.workers.report import BatchReport

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.integration
BASE = "http://shop.example"


def listing_page(url: str, details: list[str], listings: list[str],
                 ignored: dict[str, int] | None = None) -> PageResult:
    fetch = FetchResult(url, "ok", final_url=url, status=200)
    return PageResult(fetch, "listing", url, discovery=Discovery(details, listings, ignored or {}))


def queued(redis_client, source_name: str) -> list[TaskMessage]:
    return [TaskMessage.from_json(raw) for raw in redis_client.lrange(SourceKeys(source_name).intake, 0, -1)]


@pytest.fixture
def discard_follower(redis_client, configure_settings) -> LinkFollower:
    """No output to consult (the discard sink) and no runs: Redis is all the follower needs."""
    settings: HarvesterSettings = configure_settings(output_sink="discard")
    return LinkFollower(URLStore(redis_client), RunFrontier(redis_client), Intake(redis_client, settings),
                        DataHandler(settings), packages=lambda: pytest.fail("no package without a run"))


def test_listing_pages_first_then_new_details_once(discard_follower, redis_client) -> None:
    source = demo_source(BASE, "follow")
    parent = TaskMessage(task_id="parent", source=source.name, kind="listing", url=f"{BASE}/shop", depth=2,
                         country="SG")
    page = listing_page(parent.url, [f"{BASE}/product/{n}" for n in (1, 2, 3)], [f"{BASE}/shop?page=2"],
                        {"scheme:mailto": 2})
    report = BatchReport(source.name)
    discard_follower.follow(source, parent, page, report)
    children = queued(redis_client, source.name)
    assert [(child.kind, child.url) for child in children] == [
        ("listing", f"{BASE}/shop?page=2"), ("details", f"{BASE}/product/1"), ("details", f"{BASE}/product/2"),
        ("details", f"{BASE}/product/3")]
    assert {(child.depth, child.country, child.run_id) for child in children} == {(3, "SG", None)}
    assert children[1].task_id == discovered_task_id(source.name, None, None, f"{BASE}/product/1")
    assert report.discovered == 4 and report.outcomes == {"links_new": 4, "links_ignored:scheme:mailto": 2,
                                                          "links_duplicate": 0}

    # another listing page finds two of the same products and one new: the checker drops the two
    other = TaskMessage(task_id="other", source=source.name, kind="listing", url=f"{BASE}/shop?page=9")
    again = BatchReport(source.name)
    discard_follower.follow(source, other, listing_page(other.url, [f"{BASE}/product/{n}" for n in (2, 3, 4)], []),
                            again)
    assert [child.url for child in queued(redis_client, source.name)[4:]] == [f"{BASE}/product/4"]
    assert again.outcomes["links_duplicate"] == 2 and again.discovered == 1

    # the same listing retried (its task id owns what it found): everything comes back, with the same ids
    retried = BatchReport(source.name)
    discard_follower.follow(source, parent, page, retried)
    assert retried.outcomes["links_duplicate"] == 0 and retried.discovered == 4
    assert [child.task_id for child in queued(redis_client, source.name)[5:]] == [child.task_id for child in children]


def test_max_new_urls_caps_a_run_and_gives_back_what_it_refused(discard_follower, redis_client) -> None:
    source = demo_source(BASE, "capped", listing={"link_selectors": ["a"], "follow": ".", "max_new_urls": 3})
    parent = TaskMessage(task_id="p", source=source.name, kind="listing", url=f"{BASE}/shop", run_id="r1")
    report = BatchReport(source.name)
    urls = [f"{BASE}/product/{n}" for n in range(5)]
    discard_follower.follow(source, parent, listing_page(parent.url, urls, []), report)
    assert [child.url for child in queued(redis_client, source.name)] == urls[:3]
    assert report.outcomes["links_over_max_new_urls"] == 2
    assert URLStore(redis_client).seen(source, urls[3:]) == dict.fromkeys(urls[3:], False)  # a later run may take them


def test_a_page_without_discovery_queues_nothing(discard_follower, redis_client) -> None:
    source = demo_source(BASE, "nothing")
    parent = TaskMessage(task_id="p", source=source.name, kind="listing", url=f"{BASE}/shop")
    page = PageResult(FetchResult(parent.url, "ok"), "listing", parent.url)
    report = BatchReport(source.name)
    discard_follower.follow(source, parent, page, report)
    assert report.discovered == 0 and queued(redis_client, source.name) == []


def test_discovered_tasks_join_the_parents_package_before_intake(harvester_settings, redis_client,
                                                                  mongo_server) -> None:
    source = demo_source(BASE, "packaged")
    clients = WorkerClients(harvester_settings, redis_client)
    packages: PackageStore = clients.packages
    packages.ensure_indexes()
    seed = PackageTask(planned_task_id(source.name, "run", 0, f"{BASE}/shop"), f"{BASE}/shop", "listing", 0)
    packages.create_packages(source.name, "run", [(0, [seed])])
    parent = TaskMessage(task_id=seed.task_id, source=source.name, kind="listing", url=seed.url, run_id="run",
                         package_id=0)
    report = BatchReport(source.name)
    follower = LinkFollower.from_settings(harvester_settings, clients)
    follower.follow(source, parent, listing_page(parent.url, [f"{BASE}/product/1"], []), report)
    (child,) = queued(redis_client, source.name)
    assert child.task_id == planned_task_id(source.name, "run", 0, f"{BASE}/product/1") and child.package_id == 0
    package = mongo_server.client()[harvester_settings.mongo_database]["packages"].find_one({"source": source.name})
    assert set(package["pending"]) == {seed.task_id, child.task_id} and package["discovered"] == 1


class CountingRobots:
    """A real robots.txt cache (in this process) that counts the links it is asked to screen."""

    def __init__(self, text: str) -> None:
        from harvester.scraping.fetching.robots import RobotsCache, RobotsRules

        self.cache = RobotsCache(None, 3600)
        self.cache._remember(RobotsRules(BASE, text, 200))
        self.screened = 0

    def filter_allowed(self, urls: list[str], user_agent: str) -> tuple[list[str], int]:
        self.screened += len(urls)
        return self.cache.filter_allowed(urls, user_agent)


def test_links_are_cut_by_max_new_urls_before_robots_txt_screens_them(redis_client, configure_settings) -> None:
    """A listing page of 5,000 links was screened against robots.txt whole (103k links: 78 s) before max_new_urls
    kept 10 of them; the cap cuts first, and a disallowed link gives its place back."""
    settings: HarvesterSettings = configure_settings(output_sink="discard")
    robots = CountingRobots("User-agent: *\nDisallow: /product/1\n")  # /product/1, /product/10..19, ...
    follower = LinkFollower(URLStore(redis_client), RunFrontier(redis_client), Intake(redis_client, settings),
                            DataHandler(settings), packages=lambda: pytest.fail("no package without a run"),
                            robots=robots, user_agent="Harvester/1")
    source = demo_source(BASE, "screened", robots="obey",
                         listing={"link_selectors": ["a"], "follow": ".", "max_new_urls": 10})
    parent = TaskMessage(task_id="p", source=source.name, kind="listing", url=f"{BASE}/shop", run_id="r1")
    urls = [f"{BASE}/product/{n}" for n in range(5000)]
    report = BatchReport(source.name)
    follower.follow(source, parent, listing_page(parent.url, urls, []), report)
    assert robots.screened <= 10, robots.screened
    queued_urls = [child.url for child in queued(redis_client, source.name)]
    assert queued_urls == [url for url in urls[:10] if url != f"{BASE}/product/1"]
    assert report.outcomes["links_ignored:robots_disallowed"] == 1
    assert URLStore(redis_client).seen(source, [f"{BASE}/product/1"]) == {f"{BASE}/product/1": False}
    second = TaskMessage(task_id="q", source=source.name, kind="listing", url=f"{BASE}/shop?page=2", run_id="r1")
    follower.follow(source, second, listing_page(second.url, [f"{BASE}/item/a", f"{BASE}/item/b"], []),
                    BatchReport(source.name))
    assert [child.url for child in queued(redis_client, source.name)][9:] == [f"{BASE}/item/a"]  # its place back
