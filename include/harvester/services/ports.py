"""Loopback ports: what is free, and each launcher mode's plan of ports (each one moved by a variable)."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Mapping
from typing import ClassVar, Self

LOOPBACK = "127.0.0.1"


def is_port_free(port: int, host: str = LOOPBACK) -> bool:
    """True when nothing listens on host:port and we may bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = LOOPBACK) -> int:
    """A port the kernel says is free now (for test servers that must not clash with `make run`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@dataclasses.dataclass(frozen=True)
class PortPlan:
    """The loopback ports of one launcher mode (a frozen dataclass of ``name: default`` fields); each
    moves with ``<ENVIRONMENT_PREFIX><NAME>_PORT``, e.g. when 8080 is taken."""

    ENVIRONMENT_PREFIX: ClassVar[str] = "HARVESTER_"

    @classmethod
    def variable(cls, name: str) -> str:
        """The environment variable that moves the port ``name``."""
        return f"{cls.ENVIRONMENT_PREFIX}{name.upper()}_PORT"

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Self:
        defaults = cls()
        return cls(**{field.name: int(environ.get(cls.variable(field.name), getattr(defaults, field.name)))
                      for field in dataclasses.fields(cls)})

    @classmethod
    def free(cls) -> Self:
        """Ports the kernel says are free now (tests)."""
        return cls(**{field.name: free_port() for field in dataclasses.fields(cls)})
