"""A source's quality thresholds (DESIGN.md section 11): when a run's data makes the run red.

The shares are of what a run reached: ``min_stored_share`` of the pages that answered (a response that
could be read: stored, rejected, refused markup or a record that could not be written),
``max_rejected_share`` of the records extracted (a detail page, or a listing item), ``max_dead_share``
of the tasks the run settled (stored, followed or dead-lettered) that died without an answer (the site
unreachable, HTTP errors past the retries; a rejected page counts as rejected, not here).
``min_records`` is the least the run must store (0: no minimum). A run past one fails its ``report``
task with the reason in one line, unless ``on_breach: warn``, which keeps it green and flagged. A manual
trigger may override each (DAG params).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from harvester.config.attributes import StrictModel

QUALITY_PARAMS = ("min_stored_share", "max_rejected_share", "max_dead_share", "min_records", "on_breach")


class Quality(StrictModel):
    """Thresholds a run's data must meet for the run to be green."""

    min_stored_share: float = Field(default=0.95, ge=0, le=1, description="Share (0-1) of the pages that answered "
                                                                          "whose records were stored.")
    max_rejected_share: float = Field(default=0.05, ge=0, le=1, description="Share (0-1) of extracted records a "
                                                                            "required attribute or rule may reject.")
    max_dead_share: float = Field(default=0.10, ge=0, le=1, description="Share (0-1) of the run's settled tasks "
                                                                        "that may die unanswered (dead letters "
                                                                        "of fetches).")
    min_records: int = Field(default=0, ge=0, description="Records the run must store (0: no minimum).")
    on_breach: Literal["fail", "warn"] = Field(
        default="fail", description="fail: the report task fails (the DAG run is failed, Airflow's callbacks and "
                                    "retries apply); warn: the run stays green, flagged degraded.")

    def overridden(self, params: Mapping[str, Any] | None) -> Quality:
        """These thresholds with a trigger's params over them (None or missing: the source's)."""
        given = {name: params[name] for name in QUALITY_PARAMS if params and params.get(name) is not None}
        return self.model_validate({**self.model_dump(), **given}) if given else self
