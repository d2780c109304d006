"""Local services for `make run` and `make test`: ports, PID files, readiness checks, MongoDB choice.
"""

from harvester import lazy_exports

_EXPORTS = {
    "LOOPBACK": "ports",
    "choose_mongo": "mongo",
    "free_port": "ports",
    "redact": "mongo",
    "wait_until": "readiness",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
