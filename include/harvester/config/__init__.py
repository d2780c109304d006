"""The config layer: one YAML file per source, validated into a :class:`SourceConfig`."""

from harvester.config.attributes import (
    ELEMENT_SELECTOR_KINDS,
    JSON_PREFIX,
    XPATH_PREFIX,
    Attribute,
    ListingRecords,
    RecordItem,
    StructuredPath,
    compile_jmespath,
    meta_expression,
    scalar_type,
)
from harvester.config.blocks import BlockMarkers
from harvester.config.browser import (
    Action,
    BrowserOptions,
    ClickSpec,
    DelayWait,
    DismissSpec,
    NetworkIdleWait,
    ScrollSpec,
    SelectorWait,
    WaitSpec,
)
from harvester.config.incremental import AfterSchedule
from harvester.config.loader import (
    SOURCE_SUFFIXES,
    Problem,
    SourceSet,
    default_directory,
    get_source,
    load_source_file,
    load_sources,
    parse_source,
)
from harvester.config.locales import COUNTRY_VISITORS, Visitor, visitor_of
from harvester.config.model import MAX_BATCH_SIZE, Archive, Listing, SourceConfig, format_duration, parse_duration
from harvester.config.proxy import DIRECT_TIER, ProxyOptions
from harvester.config.quality import QUALITY_PARAMS, Quality
from harvester.config.requests import HttpRequest, NextRequest, RequestSeed, request_key
from harvester.config.run_options import (
    BATCH_SIZE_PARAM,
    DETAIL_URLS_PARAM,
    MAX_PACKAGES_PARAM,
    REEXTRACT_RUN_PARAM,
    REEXTRACT_SINCE_PARAM,
    URLS_PARAM,
    RunOptions,
)
from harvester.config.value_rules import RULE_NAMES, ValueRules, rule_bound
from harvester.errors import SourceConfigError

__all__ = [
    "BATCH_SIZE_PARAM",
    "COUNTRY_VISITORS",
    "DETAIL_URLS_PARAM",
    "DIRECT_TIER",
    "ELEMENT_SELECTOR_KINDS",
    "JSON_PREFIX",
    "MAX_BATCH_SIZE",
    "MAX_PACKAGES_PARAM",
    "QUALITY_PARAMS",
    "REEXTRACT_RUN_PARAM",
    "REEXTRACT_SINCE_PARAM",
    "RULE_NAMES",
    "SOURCE_SUFFIXES",
    "URLS_PARAM",
    "XPATH_PREFIX",
    "Action",
    "AfterSchedule",
    "Archive",
    "Attribute",
    "BlockMarkers",
    "BrowserOptions",
    "ClickSpec",
    "DelayWait",
    "DismissSpec",
    "HttpRequest",
    "Listing",
    "ListingRecords",
    "NetworkIdleWait",
    "NextRequest",
    "Problem",
    "ProxyOptions",
    "Quality",
    "RecordItem",
    "RequestSeed",
    "RunOptions",
    "ScrollSpec",
    "SelectorWait",
    "SourceConfig",
    "SourceConfigError",
    "SourceSet",
    "StructuredPath",
    "ValueRules",
    "Visitor",
    "WaitSpec",
    "compile_jmespath",
    "default_directory",
    "format_duration",
    "get_source",
    "load_source_file",
    "load_sources",
    "meta_expression",
    "parse_duration",
    "parse_source",
    "request_key",
    "rule_bound",
    "scalar_type",
    "visitor_of",
]
