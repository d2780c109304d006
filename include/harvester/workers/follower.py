"""The link follower: what a listing page found becomes new tasks (DESIGN.md section 7).

Next listing pages first (they are the crawl's critical path: each one leads to the next), then the
detail pages that pass the duplicate-URL checker and the run's ``max_new_urls``. Discovered tasks are
added to their parent's package BEFORE they are pushed to intake, so a package never finishes with
work still to come. Link extraction itself is :func:`harvester.scraping.discovery.links.discover_links`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from harvester.config import HttpRequest, SourceConfig, request_key
from harvester.distributor import Intake, TaskMessage
from harvester.scraping import SCREENING_TIMEOUT, TOO_MANY_HOSTS, PageResult, RobotsCache, strip_userinfo
from harvester.settings import HarvesterSettings
from harvester.storage import DataHandler, RunFrontier, URLStore, planned_task_id, url_digest
from harvester.workers.report import BatchReport

if TYPE_CHECKING:
    from harvester.storage import PackageStore
    from harvester.workers.clients import WorkerClients


def discovered_task_id(source: str, run_id: str | None, package_id: int | None, url: str) -> str:
    """Deterministic, so a listing page processed twice discovers the very same tasks."""
    if run_id is not None and package_id is not None:
        return planned_task_id(source, run_id, package_id, url)
    return url_digest(f"{source}\x1f{run_id}\x1f{url}")


def child_task(source: SourceConfig, parent: TaskMessage, url: str, kind: str,
               request: HttpRequest | None = None) -> TaskMessage:
    """A task discovered on ``parent``'s page: one level deeper, same run, package and country. Its id is
    made of its key (the URL, or the URL and the body's digest of a ``request``), so two bodies to one URL are
    two tasks and the same body found again is the same task."""
    key = url if request is None else request_key(url, request)
    return TaskMessage(
        task_id=discovered_task_id(source.name, parent.run_id, parent.package_id, key),
        source=source.name, kind=kind, url=url, depth=parent.depth + 1, run_id=parent.run_id,
        package_id=parent.package_id, country=parent.country or source.country, request=request,
    )


def screening_outcome(reason: str) -> str:
    """The ``links_ignored:`` counter of a link screening's refusal: the bounds apart from the addresses."""
    if reason.startswith(TOO_MANY_HOSTS):
        return "too_many_hosts"
    if reason.startswith(SCREENING_TIMEOUT):
        return "screening_timeout"
    return "address_refused"


# Links a bound of the source or the settings left unfollowed (listing.max_depth, next pages per page): the run's
# report names them, so a crawl cut short says so (a paginated API read 3 pages of 5 under the default max_depth).
BOUNDS = frozenset({"beyond_max_depth", "over_next_pages_per_page"})


def cut(report: BatchReport, message: TaskMessage, counter: str, amount: int) -> None:
    """Count links a bound left unfollowed in the run's figures too (the report's ``links_cut``)."""
    report.extracted.by_run[message.run_id][counter] += amount


class LinkFollower:
    """Listing page → canonical links → duplicate-URL checker and run cap → new tasks in package and intake."""

    def __init__(self, urls: URLStore, frontier: RunFrontier, intake: Intake, data: DataHandler,
                 packages: Callable[[], PackageStore], refusals: Callable[[list[str]], dict[str, str]] | None = None,
                 robots: RobotsCache | None = None, user_agent: str = "", *,
                 max_listing_pages_per_run: int | None = None) -> None:
        self.urls = urls
        self.frontier = frontier
        self.intake = intake
        self.data = data
        self.packages = packages
        self.refusals = refusals  # URLs -> reason for those whose address is refused (None: no checks)
        self.robots = robots
        self.user_agent = user_agent
        self.max_listing_pages_per_run = max_listing_pages_per_run  # None: uncapped (the setting caps workers)

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, clients: WorkerClients,
                      refusals: Callable[[list[str]], dict[str, str]] | None = None,
                      robots: RobotsCache | None = None) -> LinkFollower:
        return cls(clients.urls, clients.frontier, clients.intake, clients.data, lambda: clients.packages,
                   refusals, robots, settings.user_agent,
                   max_listing_pages_per_run=settings.max_listing_pages_per_run)

    def screen(self, source: SourceConfig, urls: list[str], report: BatchReport) -> list[str]:
        """Drop links whose address is refused (loopback, link-local, private...) and, when the source
        obeys robots.txt, those a cached robots.txt disallows; each counted as an ignored link."""
        return self.screen_robots(source, self.screen_addresses(urls, report), report)

    def screen_addresses(self, urls: list[str], report: BatchReport) -> list[str]:
        """Drop links whose address is refused (a literal check: no lookup), each counted as an ignored link."""
        if not urls:
            return urls
        urls = list(dict.fromkeys(strip_userinfo(url) for url in urls))  # credentials in links are never used
        if self.refusals is not None:
            refused = self.refusals(urls)
            for reason in refused.values():
                report.outcomes[f"links_ignored:{screening_outcome(reason)}"] += 1
            if refused:
                urls = [url for url in urls if url not in refused]
        return urls

    def screen_robots(self, source: SourceConfig, urls: list[str], report: BatchReport) -> list[str]:
        """Drop the links a cached robots.txt disallows when the source obeys it. Called on what the caps left
        (``max_new_urls``, the listing caps): a page of 100,000 links is screened for the few it may add."""
        if urls and self.robots is not None and source.robots == "obey":
            user_agent = source.headers.get("User-Agent") or self.user_agent
            urls, disallowed = self.robots.filter_allowed(urls, user_agent)
            if disallowed:
                report.outcomes["links_ignored:robots_disallowed"] += disallowed
        return urls

    def follow(self, source: SourceConfig, message: TaskMessage, page: PageResult, report: BatchReport,
               chain: list[tuple[TaskMessage, TaskMessage]] | None = None) -> None:
        """Queue what ``page`` (a listing page of ``message``) links to. Raises on a Redis or MongoDB
        fault: the caller retries the listing page, whose retry gets its URLs back (owner = task id).

        ``chain``: when given and the source builds its next request from the response (``listing.next``), that
        one next request is added to the package but NOT pushed: (``message``, next task) is appended instead, for
        the worker to send itself (:class:`harvester.workers.chains.ChainContinuation`), which pushes it
        when the limits say no. Every bound (``max_depth``, the run's listing pages) has already cut it here."""
        discovery = page.discovery
        if discovery is None or source.listing is None:
            return
        for reason, amount in discovery.ignored.items():
            report.outcomes[f"links_ignored:{reason}"] += amount
            if reason in BOUNDS:
                cut(report, message, f"links_ignored:{reason}", amount)
        listings = self.frontier.new_listing_pages(source.name, message.run_id,
                                                   self.screen_addresses(discovery.listings, report),
                                                   owner=message.task_id)
        listings = self.screen_robots(source, self.within_listing_cap(source, message, listings, report), report)
        next_pages = [discovery.listing_request(key) for key in listings]  # a link, or an API's next request
        children = [child_task(source, message, url, "listing", request) for url, request in next_pages]
        if chain is not None and source.listing.next is not None and len(children) == 1:
            self.add_to_package(source, message, children)
            report.discovered += 1
            report.outcomes["links_new"] += 1
            chain.append((message, children[0]))
        else:
            self.queue(source, message, children, report)
        details = self.new_details(source, message, self.screen_addresses(discovery.details, report),
                                   source.listing.max_new_urls, report)
        self.queue(source, message, [child_task(source, message, url, "details") for url in details], report)

    def new_details(self, source: SourceConfig, message: TaskMessage, candidates: list[str], cap: int,
                    report: BatchReport, counter: str = "links_over_max_new_urls") -> list[str]:
        """The detail links not seen before that fit under the run's ``cap``, then screened by robots.txt: the
        caps cut first, so robots.txt reads only what may be queued; a disallowed link gives its place back."""
        authority = None if self.data.discarding else self.data.collection(source)
        details = self.urls.filter_new(source, candidates, owner=message.task_id, authority=authority)
        report.outcomes["links_duplicate"] += len(candidates) - len(details)
        granted = self.frontier.reserve_new_urls(source.name, message.run_id, len(details), cap)
        if granted < len(details):
            report.outcomes[counter] += len(details) - granted
            cut(report, message, counter, len(details) - granted)
            self.urls.forget(source, details[granted:])
            details = details[:granted]
        allowed = self.screen_robots(source, details, report)
        if len(allowed) < len(details):
            kept = set(allowed)
            self.urls.forget(source, [url for url in details if url not in kept])
            self.frontier.give_back_new_urls(source.name, message.run_id, len(details) - len(allowed))
        return allowed

    def within_listing_cap(self, source: SourceConfig, message: TaskMessage, listings: list[str],
                           report: BatchReport) -> list[str]:
        """The new listing pages that fit under ``max_listing_pages_per_run``; the rest are counted and
        not queued."""
        if self.max_listing_pages_per_run is None or not listings:
            return listings
        granted = self.frontier.reserve_listing_pages(source.name, message.run_id, len(listings),
                                                      self.max_listing_pages_per_run)
        if granted < len(listings):
            report.outcomes["links_ignored:over_listing_pages_per_run"] += len(listings) - granted
            cut(report, message, "links_ignored:over_listing_pages_per_run", len(listings) - granted)
        return listings[:granted]

    def queue(self, source: SourceConfig, parent: TaskMessage, children: list[TaskMessage],
              report: BatchReport) -> None:
        """Add discovered tasks to the parent's package, then push them to intake (in that order)."""
        if not children:
            return
        self.add_to_package(source, parent, children)
        self.intake.push(source.name, children)  # by name: the producer's registration stays the one copy
        report.discovered += len(children)
        report.outcomes["links_new"] += len(children)

    def add_to_package(self, source: SourceConfig, parent: TaskMessage, children: list[TaskMessage]) -> None:
        """Record discovered tasks in the parent's package (before they are pushed or chained: it stays open)."""
        if parent.run_id is not None and parent.package_id is not None:
            self.packages().add_tasks(source.name, parent.run_id, parent.package_id,
                                      [child.task_id for child in children])
