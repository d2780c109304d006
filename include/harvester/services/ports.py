"""Loopback port selection."""

from __future__ import annotations

import socket

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
