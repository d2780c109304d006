"""The config layer: one YAML file per source, validated into a :class:`SourceConfig`."""

from harvester.config.model import SourceConfig

__all__ = ["SourceConfig"]
