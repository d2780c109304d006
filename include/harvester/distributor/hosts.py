"""The host a task's URL points at, exactly as ``lua/common.lua`` computes it (per-host slots and pauses)."""

from __future__ import annotations

import re

_AUTHORITY = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://([^/?#]*)")


def host_of(url: str) -> str:
    """``host[:port]`` in lower case without user info, or "" for a URL without an authority."""
    match = _AUTHORITY.match(url)
    if not match:
        return ""
    return match.group(1).rsplit("@", 1)[-1].lower()
