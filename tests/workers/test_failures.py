"""The failure policy: each rule decided without any server, then applied against real Redis."""

from __future__ import annotations

import time

import pytest
from harvester.distributor import DeadLetters, Intake, RateLimitStore, TaskMessage
from harvester.redis_keys import SourceKeys
from harvester.scraping.fetching.fetcher import FetchResult
from harvester.settings import HarvesterSettings
from harvester.workers.failures import DEFAULT_RETRY_AFTER_SECONDS, FailureAction, FailureDecision, FailurePolicy
from harvester.workers.report import BatchReport

from tests.fixtures.demo_site import demo_source

URL = "http://shop.example:8080/product/1"


def decide(outcome: str, status: int | None = None, retry_after: float | None = None,
           reason: str = "") -> FailureDecision:
    policy = FailurePolicy(store=None, packages=lambda: None)  # type: ignore[arg-type]  # deciding needs neither
    return policy.decide(FetchResult(URL, outcome, status=status, retry_after=retry_after, reason=reason))


@pytest.mark.unit
@pytest.mark.parametrize(("outcome", "status", "retry_after", "expected"), [
    ("http_error", 404, None, FailureDecision(FailureAction.DEAD_LETTER, "http_404: HTTP 404")),
    ("too_many_redirects", None, None, FailureDecision(FailureAction.DEAD_LETTER, "too_many_redirects: loop")),
    ("parse_error", 200, None, FailureDecision(FailureAction.DEAD_LETTER, "parse_error: loop")),
    ("http_error", 500, None, FailureDecision(FailureAction.RETRY, "http_500: HTTP 500")),
    ("http_error", 502, 4.0, FailureDecision(FailureAction.RETRY, "http_502: HTTP 502", retry_after=4.0)),
    ("timeout", None, None, FailureDecision(FailureAction.RETRY, "timeout: loop")),
    ("connection_error", None, None, FailureDecision(FailureAction.RETRY, "connection_error: loop")),
    ("blocked", 403, None, FailureDecision(FailureAction.RETRY, "blocked: HTTP 403")),
    ("blocked", 403, 90.0, FailureDecision(FailureAction.RETRY, "blocked: HTTP 403", 90.0, 90.0)),
    ("http_error", 429, 7.0, FailureDecision(FailureAction.RETRY, "http_429: HTTP 429", 7.0, 7.0)),
    ("http_error", 503, None, FailureDecision(FailureAction.RETRY, "http_503: HTTP 503",
                                              DEFAULT_RETRY_AFTER_SECONDS, DEFAULT_RETRY_AFTER_SECONDS)),
])
def test_each_failure_gets_its_ending(outcome, status, retry_after, expected) -> None:
    reason = f"HTTP {status}" if outcome in ("http_error", "blocked") else "loop"
    assert decide(outcome, status, retry_after, reason) == expected


@pytest.mark.unit
def test_a_failure_without_a_reason_is_named_by_its_counter() -> None:
    assert decide("timeout").reason == "timeout"


@pytest.mark.unit
def test_the_default_wait_of_a_rate_limit_is_the_policys() -> None:
    policy = FailurePolicy(store=None, packages=lambda: None, default_retry_after=5.0)  # type: ignore[arg-type]
    decision = policy.decide(FetchResult(URL, "http_error", status=429))
    assert (decision.retry_after, decision.pause_seconds) == (5.0, 5.0)


# -- applied through the rate-limit store ---------------------------------------------------------------
@pytest.fixture
def policy_settings(configure_settings) -> HarvesterSettings:
    return configure_settings(retry_base_seconds=0.05, retry_max_seconds=0.1)


def admitted(redis_client, settings: HarvesterSettings, retries: int, url: str = URL) -> tuple[TaskMessage, object]:
    source = demo_source("http://shop.example:8080", "failing", retries=retries)
    Intake(redis_client, settings).push(source, [TaskMessage(task_id="t1", source=source.name, url=url)])
    store = RateLimitStore(redis_client, settings)
    (message,) = store.admit(source.name, 1).task_messages()
    return message, source


def admit_again(store: RateLimitStore, source_name: str, timeout: float = 10.0) -> TaskMessage:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        admission = store.admit(source_name, 1)
        if admission.messages:
            return admission.task_messages()[0]
        time.sleep(0.05)
    raise AssertionError(f"{source_name}: no retry admitted within {timeout}s")


@pytest.mark.integration
def test_retries_follow_the_sources_retries_then_dead_letter(redis_client, policy_settings) -> None:
    message, source = admitted(redis_client, policy_settings, retries=1)
    store = RateLimitStore(redis_client, policy_settings)
    policy = FailurePolicy(store, packages=lambda: None)  # type: ignore[arg-type]  # no run: no package
    report = BatchReport(source.name)
    failure = FetchResult(message.url, "http_error", status=500, reason="HTTP 500")
    assert policy.fetch_failed(source.name, message, failure, report).action is FailureAction.RETRY
    assert (report.retried, report.dead) == (1, 0)
    again = admit_again(store, source.name)
    assert again.attempt == 1
    policy.fetch_failed(source.name, again, failure, report)
    assert (report.retried, report.dead) == (1, 1)  # retries: 1 -> the second failure is the last
    (letter,) = DeadLetters(redis_client).list(source.name)
    assert letter.reason == "http_500: HTTP 500"


@pytest.mark.integration
def test_a_permanent_failure_is_dead_lettered_at_once_whatever_the_retries(redis_client, policy_settings) -> None:
    message, source = admitted(redis_client, policy_settings, retries=5)
    store = RateLimitStore(redis_client, policy_settings)
    report = BatchReport(source.name)
    FailurePolicy(store, packages=lambda: None).fetch_failed(  # type: ignore[arg-type]
        source.name, message, FetchResult(message.url, "http_error", status=404, reason="HTTP 404"), report)
    assert (report.retried, report.dead) == (0, 1)
    assert [letter.reason for letter in DeadLetters(redis_client).list(source.name)] == ["http_404: HTTP 404"]
    assert store.stats([source.name])[source.name].active == 0


@pytest.mark.integration
def test_a_rate_limit_pauses_the_source_and_the_host_for_retry_after(redis_client, policy_settings) -> None:
    message, source = admitted(redis_client, policy_settings, retries=3)
    store = RateLimitStore(redis_client, policy_settings)
    report = BatchReport(source.name)
    before = time.time()
    FailurePolicy(store, packages=lambda: None).fetch_failed(  # type: ignore[arg-type]
        source.name, message, FetchResult(message.url, "http_error", status=429, retry_after=60.0), report)
    assert report.retried == 1
    keys = SourceKeys(source.name)
    assert float(redis_client.get(keys.paused_until)) >= before + 59
    assert float(redis_client.hget(keys.host_paused, "shop.example:8080")) >= before + 59
    assert store.admit(source.name, 1).status == "paused"


@pytest.mark.integration
def test_a_batchs_endings_are_recorded_together_and_survive_redis_going_away(redis_client, policy_settings,
                                                                              caplog) -> None:
    """Within deferred() nothing is sent until the block ends; then one round trip records them all. With Redis
    gone at that moment nothing is raised and nothing counted: the leases stay for the reaper, the log says why."""
    import redis
    from harvester.services.ports import free_port

    source = demo_source("http://shop.example:8080", "failing", retries=3)
    Intake(redis_client, policy_settings).push(source, [TaskMessage(task_id=f"t{n}", source=source.name,
                                                                    url=f"{URL}?n={n}") for n in range(3)])
    store = RateLimitStore(redis_client, policy_settings)
    messages = store.admit(source.name, 3).task_messages()
    policy = FailurePolicy(store, packages=lambda: None)  # type: ignore[arg-type]  # no run: no package
    report = BatchReport(source.name)
    with policy.deferred():
        policy.fetch_failed(source.name, messages[0], FetchResult(messages[0].url, "http_error", status=429,
                                                                   retry_after=60.0), report)
        policy.dead_letter(messages[1], "http_404: HTTP 404", report)
        policy.retry(messages[2], "storage failed: down", None, report)
        assert store.stats([source.name])[source.name].active == 3 and report.retried == report.dead == 0
    assert (report.retried, report.dead) == (2, 1)
    assert store.stats([source.name])[source.name].active == 0
    assert store.admit(source.name, 3).status == "paused"  # the 429's pause went with them

    other = demo_source("http://shop.example:8080", "failing_later", retries=3)
    Intake(redis_client, policy_settings).push(other, [TaskMessage(task_id="t9", source=other.name, url=URL)])
    [held] = store.admit(other.name, 1).task_messages()
    gone = RateLimitStore(redis.Redis(port=free_port(), socket_connect_timeout=0.5), policy_settings)
    report = BatchReport(other.name)
    away = FailurePolicy(gone, packages=lambda: None)  # type: ignore[arg-type]
    with away.deferred():
        away.retry(held, "http_500: HTTP 500", None, report)
    assert (report.retried, report.dead) == (0, 0)
    assert store.active_task_ids(other.name) == ["t9"]  # still leased: the reaper hands it back
    assert "could not hand 1 tasks back" in caplog.text


@pytest.mark.integration
def test_a_proxy_error_is_never_charged_to_the_sites_retries_nor_dead_lettered(redis_client, policy_settings) -> None:
    """Every proxy of the pool failed: the proxies' failure. The task comes back with the same attempt, however many
    times it happens, with retries: 0, and no host is paused for it."""
    message, source = admitted(redis_client, policy_settings, retries=0)
    store = RateLimitStore(redis_client, policy_settings)
    policy = FailurePolicy(store, packages=lambda: None)  # type: ignore[arg-type]  # no run: no package
    report = BatchReport(source.name)
    failure = FetchResult(message.url, "proxy_error", reason="no proxy of the pool could open it")
    for _ in range(3):
        assert policy.fetch_failed(source.name, message, failure, report).action is FailureAction.RETRY
        message = admit_again(store, source.name)
        assert message.attempt == 0
    assert (report.retried, report.dead) == (3, 0)
    assert DeadLetters(redis_client).list(source.name) == []
    assert redis_client.hget(SourceKeys(source.name).host_paused, "shop.example:8080") is None
