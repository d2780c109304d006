"""Failed requests with a method and a body: retried only when the source says they are safe to repeat."""

from __future__ import annotations

import pytest
from harvester.config import HttpRequest
from harvester.distributor import DeadLetters, Intake, RateLimitStore, TaskMessage
from harvester.scraping.fetching.fetcher import FetchResult
from harvester.settings import HarvesterSettings
from harvester.workers.failures import FailureAction, FailurePolicy
from harvester.workers.report import BatchReport

from tests.fixtures.demo_site import demo_source

URL = "http://shop.example:8080/orders"

pytestmark = pytest.mark.integration


@pytest.fixture
def policy_settings(configure_settings) -> HarvesterSettings:
    return configure_settings(retry_base_seconds=0.05, retry_max_seconds=0.1)


def admitted(redis_client, settings: HarvesterSettings, safe_to_repeat: bool) -> tuple[TaskMessage, str]:
    source = demo_source("http://shop.example:8080", "posting", retries=3)
    request = HttpRequest.model_validate({"json": {"order": 1}, "safe_to_repeat": safe_to_repeat})
    Intake(redis_client, settings).push(source, [TaskMessage(task_id="t1", source=source.name, url=URL,
                                                             request=request)])
    (message,) = RateLimitStore(redis_client, settings).admit(source.name, 1).task_messages()
    assert message.request == request  # the request travels through intake and admission
    return message, source.name


def fail(redis_client, settings: HarvesterSettings, message: TaskMessage, source: str,
         fetch: FetchResult) -> tuple[FailureAction, BatchReport]:
    report = BatchReport(source)
    policy = FailurePolicy(RateLimitStore(redis_client, settings), packages=lambda: None)  # type: ignore[arg-type]
    return policy.fetch_failed(source, message, fetch, report).action, report


@pytest.mark.parametrize("safe_to_repeat", [True, False])
def test_a_server_error_is_retried_only_for_a_request_safe_to_repeat(redis_client, policy_settings,
                                                                      safe_to_repeat) -> None:
    message, source = admitted(redis_client, policy_settings, safe_to_repeat)
    action, report = fail(redis_client, policy_settings, message, source,
                          FetchResult(URL, "http_error", status=500, reason="HTTP 500"))
    if safe_to_repeat:
        assert action is FailureAction.RETRY and (report.retried, report.dead) == (1, 0)
        return
    assert action is FailureAction.DEAD_LETTER and (report.retried, report.dead) == (0, 1)
    (letter,) = DeadLetters(redis_client).list(source)
    assert letter.reason == "http_500: HTTP 500 (not retried: the request is not safe_to_repeat)"
    assert letter.task_message() is not None and letter.task_message().request == message.request  # requeueable


@pytest.mark.parametrize(("outcome", "status"), [("http_error", 429), ("robots_unavailable", None),
                                                 ("host_rate_wait", None)])
def test_a_request_the_site_did_not_process_is_retried_even_when_not_safe_to_repeat(redis_client, policy_settings,
                                                                                   outcome, status) -> None:
    message, source = admitted(redis_client, policy_settings, safe_to_repeat=False)
    action, report = fail(redis_client, policy_settings, message, source,
                          FetchResult(URL, outcome, status=status, retry_after=1.0 if status else None))
    assert action is FailureAction.RETRY and report.retried == 1
    assert DeadLetters(redis_client).list(source) == []
