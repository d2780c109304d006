"""A recorded site, served again: a source's archived pages on a loopback port, by path and query.

``harvester replay SOURCE [--run RUN]`` answers each request with the archived status, headers and body of the
latest page of that path (of the run, or of the whole archive), so ``harvester try``, a user's own tests or a
second harvest run against what a real site said, without reaching it. Pages are looked up by path and query
(the recorded site's host is replaced by the replay's); a path the archive does not hold answers 404 with a
body saying so. Replays are for tools and tests: they listen on loopback only.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from harvester.errors import ArchiveUnavailable
from harvester.storage.archive_index import ArchiveIndex
from harvester.storage.archive_reader import ArchiveReader

log = logging.getLogger(__name__)

# Headers that described the recorded connection, not the page: the replay's own connection sets them.
HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding",
                         "x-archive-orig-content-encoding", "date", "server"})


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


class ArchiveReplay:
    """The pages of one source's archive (one run's, or the latest of each URL), by path and query."""

    def __init__(self, index: ArchiveIndex, source: str, run: str | None = None) -> None:
        self.source = source
        self.rows: dict[str, dict[str, Any]] = {}
        for row in index.latest(source, run):
            self.rows[path_of(row["url"])] = row
            self.rows.setdefault(path_of(row.get("final_url") or row["url"]), row)
        self.reader = ArchiveReader()

    async def answer(self, request: web.Request) -> web.Response:
        row = self.rows.get(request.path_qs)
        if row is None:
            return web.Response(status=404, text=f"not in the archive of {self.source}: {request.path_qs}\n")
        try:
            archived = self.reader.read(row)
        except ArchiveUnavailable as error:
            return web.Response(status=502, text=f"the archived page cannot be read: {error}\n")
        if archived is None:
            return web.Response(status=404, text=f"{request.path_qs} was archived as a revisit of nothing kept\n")
        headers = [(name, value) for name, value in archived.headers if name.lower() not in HOP_HEADERS]
        response = web.Response(status=archived.status, body=archived.body)
        for name, value in headers:
            response.headers.add(name, value)
        return response

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self.answer)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, _: web.Application) -> None:
        self.reader.close()
