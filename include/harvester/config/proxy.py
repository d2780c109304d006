"""A source's ``proxy:`` section: tiers of ways out, cheapest first, that a site host climbs on blocks.

``proxy.tiers: [direct, datacenter, residential]`` names the tiers in order of cost. ``direct`` is the worker's own
address (no proxy); every other tier is a pool of the source's country, the Airflow connections
``proxy_<country>_<tier>``, ``proxy_<country>_<tier>_2``, ... (``proxy_sg_residential``), with the same shared
health, failover and bans as the country's own pool (``harvester.pageslots.proxy_pool``). A host starts on the
first tier, moves up one when it blocks us there, and comes back down once the tier below has been quiet for
``proxy.quiet`` (``harvester.pageslots.proxy_tiers``, the state shared in Redis by every worker).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from harvester.config.attributes import StrictModel, duration_schema, parse_duration

__all__ = ["DIRECT_TIER", "MAX_TIERS", "ProxyOptions"]

DIRECT_TIER = "direct"  # the worker's own address: no proxy, costs nothing
MAX_TIERS = 5  # more tiers than a provider sells is a paste error
TIER_NAME = r"^[a-z][a-z0-9]{0,30}$"  # part of a connection id: proxy_<country>_<tier>
MIN_QUIET_SECONDS = 1  # an int: the schema says "minimum": 1
MAX_QUIET_SECONDS = 7 * 86_400.0
DEFAULT_QUIET_SECONDS = 600.0

QuietSeconds = Annotated[float, duration_schema(MIN_QUIET_SECONDS, "90s, 10m, 1h")]


class ProxyOptions(StrictModel):
    """How an HTTP source with a country goes out: tiers of pools, cheapest first (crawlee's tiered proxies)."""

    tiers: list[str] = Field(
        default_factory=list, max_length=MAX_TIERS,
        description="Ways out, cheapest first: `direct` (the worker's address) and pool names, each the "
                    "connections proxy_<country>_<tier>, proxy_<country>_<tier>_2, ... A host starts on the "
                    "first and moves up one tier when it blocks us there.")
    quiet: QuietSeconds = Field(
        default=DEFAULT_QUIET_SECONDS,
        description="How long a tier that a host blocked stays above it: past this with no new block there, "
                    "the host comes back down (each block soon after the last doubles it, up to 64 times).")

    @field_validator("tiers")
    @classmethod
    def _tier_names(cls, tiers: list[str]) -> list[str]:
        for tier in tiers:
            if not re.fullmatch(TIER_NAME, tier):  # a str already: this runs after pydantic
                raise ValueError(f"{tier!r} is not a tier name (lower-case letters and digits, "
                                 "a letter first: it names the connections proxy_<country>_<tier>)")
        if repeated := sorted({tier for tier in tiers if tiers.count(tier) > 1}):
            raise ValueError(f"{', '.join(repeated)} listed twice")
        if DIRECT_TIER in tiers[1:]:
            raise ValueError("direct costs nothing, so it comes first (tiers go cheapest first)")
        if len(tiers) == 1:
            raise ValueError("give two tiers or more, cheapest first (one tier is nothing to move "
                             "between: use the country's pool)")
        return tiers

    @field_validator("quiet", mode="before")
    @classmethod
    def _quiet(cls, value: Any) -> float:
        try:
            seconds = parse_duration(value).total_seconds()
        except ValueError as error:
            raise ValueError(str(error)) from None
        if not MIN_QUIET_SECONDS <= seconds <= MAX_QUIET_SECONDS:
            raise ValueError(f"between {MIN_QUIET_SECONDS:g}s and {MAX_QUIET_SECONDS / 86_400:g}d, got {seconds:g}s")
        return seconds

    @model_validator(mode="after")
    def _quiet_needs_tiers(self) -> ProxyOptions:
        if self.quiet != DEFAULT_QUIET_SECONDS and not self.tiers:  # (the default: the registered copy names it)
            raise ValueError("quiet: a quiet period is for tiers: give proxy.tiers too")
        return self


def check_proxy_rules(proxy: ProxyOptions, render: str, country: str | None) -> None:
    """The source-wide rules of ``proxy:``; ``ValueError("<field>: <reason>")`` like the model's."""
    if not proxy.tiers:
        return
    if country is None:
        raise ValueError("proxy.tiers: a tier is a pool of the source's country (proxy_<country>_<tier>): give "
                         "the source a country")
    if render != "http":
        raise ValueError("proxy.tiers: tiers are for render: http sources (a browser page leaves through its "
                         "slot's country pool)")
