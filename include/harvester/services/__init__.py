"""Local services for `make run` (both modes) and `make test`: the launcher core (``launcher``: services as
data, a supervisor by PID files), what both modes declare (``catalogue``), the embedded stack (``stack``),
the compose topology (``cluster``), ports, readiness checks and the MongoDB choice.
"""

from harvester.connections import redact
from harvester.services.mongo import choose_mongo
from harvester.services.ports import LOOPBACK, free_port, is_port_free
from harvester.services.readiness import wait_until

__all__ = ["LOOPBACK", "choose_mongo", "free_port", "is_port_free", "redact", "wait_until"]
