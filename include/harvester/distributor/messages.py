"""The task message: what travels from a producer through intake, admission and Celery to a worker."""

from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harvester.config import HttpRequest, request_key


class TaskMessage(BaseModel):
    """One page to fetch for one source. Serialised as compact JSON in Redis and Celery."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    source: str
    kind: Literal["listing", "details", "sitemap"] = "details"
    url: str
    depth: int = Field(default=0, ge=0)
    run_id: str | None = None
    package_id: int | None = None
    attempt: int = Field(default=0, ge=0)
    country: str | None = None
    enqueued_at: float = Field(default_factory=time.time)
    # A manual trigger asked for this page again now: fetched in full, whatever validators its record keeps.
    refetch: bool = False
    # The fencing token of this delivery (set by the distributor on the Celery message, never in intake):
    # only its holder may start, heartbeat, release or fail the task.
    lease_token: str | None = None
    # A request with a method and a body (an API's POST); None: a plain GET of ``url``.
    request: HttpRequest | None = None
    # Its batch's pool process died while it ran beside other started tasks (worker_lost.lua): until it ends it runs
    # in a batch of its own (a message of its own, no refill beside it), so a kill it causes is counted against it
    # alone, and the innocent pages that died with it once never die with it again.
    run_alone: bool = False

    @property
    def key(self) -> str:
        """What the task is: its canonical URL, or for a request with a body that URL and the body's digest."""
        return request_key(self.url, self.request)

    def to_json(self) -> str:
        """The task as intake and dead letters keep it (without the delivery's lease token)."""
        return self.model_dump_json(exclude={"lease_token"})

    @classmethod
    def from_json(cls, raw: str | bytes) -> TaskMessage:
        return cls.model_validate_json(raw)
