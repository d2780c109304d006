"""Loopback ports: what is free, and each launcher mode's plan of ports (each one moved by a variable)."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from collections.abc import Iterable, Mapping
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
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = LOOPBACK, besides: Iterable[int] = ()) -> list[int]:
    """``count`` distinct ports the kernel says are free now, none of ``besides`` (ports already chosen
    and not yet listened on). Every probe stays bound until all are chosen: a probe closed before the next
    one is asked for may be handed out again (a plan of 15 ports asked for one at a time named one port
    twice in CI)."""
    with contextlib.ExitStack() as probes:
        for chosen in besides:
            holder = probes.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            with contextlib.suppress(OSError):  # taken already: the kernel will not hand it out either
                holder.bind((host, chosen))
        ports = []
        for _ in range(count):
            probe = probes.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            probe.bind((host, 0))
            ports.append(int(probe.getsockname()[1]))
        return ports


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
        fields = dataclasses.fields(cls)
        return cls(**dict(zip((field.name for field in fields), free_ports(len(fields)), strict=True)))
