"""The config layer: one YAML file per source, validated into a :class:`SourceConfig`."""

from harvester.config.loader import SourceConfigError, SourceSet, get_source, load_source_file, load_sources
from harvester.config.model import SourceConfig

__all__ = ["SourceConfig", "SourceConfigError", "SourceSet", "get_source", "load_source_file", "load_sources"]
