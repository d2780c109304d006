"""The config layer: one YAML file per source, validated into a :class:`SourceConfig`."""

from harvester.config.loader import Problem, SourceSet, get_source, load_source_file, load_sources
from harvester.config.model import Attribute, SourceConfig
from harvester.config.run_options import RunOptions
from harvester.errors import SourceConfigError

__all__ = [
    "Attribute", "Problem", "RunOptions", "SourceConfig", "SourceConfigError", "SourceSet", "get_source",
    "load_source_file", "load_sources",
]
