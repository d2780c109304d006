"""What a manual trigger may override for one run of a source (the producer DAG's params).

Kept free of Airflow so the producer's logic can read a run's options from plain params.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from harvester.config.model import MAX_BATCH_SIZE, SourceConfig, check_http_url
from harvester.config.quality import Quality

BATCH_SIZE_PARAM = "batch_size"
MAX_PACKAGES_PARAM = "max_packages"
URLS_PARAM = "urls"
DETAIL_URLS_PARAM = "detail_urls"
# A trigger that names either runs a re-extraction over the source's archive instead of a harvest (no request).
REEXTRACT_SINCE_PARAM = "reextract_since"
REEXTRACT_RUN_PARAM = "reextract_run"


class RunOptions(BaseModel):
    """The limits and URL subset of one run: the source's own unless a trigger overrode them."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    batch_size: int = Field(ge=1, le=MAX_BATCH_SIZE)
    max_packages: int = Field(ge=1)
    urls: list[str] = Field(default_factory=list, description="When given, harvest only these URLs (of the source's "
                                                              "input kind: listing pages on a listing source).")
    detail_urls: list[str] = Field(
        default_factory=list,
        description="When given, harvest only these detail pages now, on a listing source too: fetched in full "
                    "(no conditional request) and extracted with the current config.")
    quality: Quality = Field(default_factory=Quality, description="The thresholds this run's data must meet.")

    @field_validator("urls", "detail_urls")
    @classmethod
    def _urls(cls, value: list[str], info: ValidationInfo) -> list[str]:
        try:
            return [check_http_url(url.strip()) for url in value if url.strip()]
        except ValueError as error:
            raise ValueError(f"{info.field_name}: {error}") from error

    @model_validator(mode="after")
    def _one_list_of_urls(self) -> RunOptions:
        if self.urls and self.detail_urls:
            raise ValueError("detail_urls: give either urls (the source's input pages) or detail_urls, not both")
        return self

    @classmethod
    def for_run(cls, source: SourceConfig, params: Mapping[str, Any] | None = None) -> RunOptions:
        """The source's batch settings with any trigger params (None or missing means: keep the source's)."""
        params = params or {}

        def given(name: str, default: Any) -> Any:
            value = params.get(name)
            return default if value is None else value

        return cls.model_validate({
            "batch_size": given(BATCH_SIZE_PARAM, source.batch.size),
            "max_packages": given(MAX_PACKAGES_PARAM, source.batch.max_packages),
            "urls": given(URLS_PARAM, []),
            "detail_urls": given(DETAIL_URLS_PARAM, []),
            "quality": source.quality.overridden(params),
        })
