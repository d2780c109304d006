"""Where records go (the MongoDB data handler, or the discard sink) and which URLs were seen.
"""

from harvester import lazy_exports

_EXPORTS = {
    "DataHandler": "data_handler",
    "RunFrontier": "url_store",
    "URLStore": "url_store",
    "WriteResult": "data_handler",
    "mongo_client": "mongo",
    "url_digest": "url_store",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
