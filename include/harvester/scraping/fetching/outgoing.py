"""What a request sends besides its URL: the method, the body with the connection's secrets filled in, and
what a redirect makes of both.

The body's secrets are filled in here, right before the transport sends it, and only for an origin the
source's credentials are bound to (as their headers are, :func:`~harvester.scraping.fetching.sites.credential_origins`):
the task, its identity, the registered config, the logs and the records only ever hold the placeholder.
A body larger than ``max_request_body_bytes`` is never sent (outcome ``refused``: the source is wrong,
retrying cannot help). Redirects follow RFC 9110 as browsers do: 307 and 308 repeat the method and the
body, every other redirect of a POST becomes a GET without a body.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from harvester.config import HttpRequest, SourceConfig
from harvester.connections import HttpCredentials, resolve_http
from harvester.scraping.fetching.addresses import AddressRefused

__all__ = ["BODY_KEEPING_REDIRECTS", "KeptCredentials", "OutgoingRequest", "RequestRefused", "credential_headers",
           "outgoing_request"]

BODY_KEEPING_REDIRECTS = frozenset({307, 308})
CREDENTIALS_MEMORY_SECONDS = 60.0
_CONNECTION_PLACEHOLDER = re.compile(r"\$\{connection\.(login|password|headers\.([A-Za-z0-9_-]+))\}")


class RequestRefused(AddressRefused):
    """A request Harvester will not send as the source wrote it (outcome ``refused``, never retried)."""


@dataclass(frozen=True, slots=True)
class OutgoingRequest:
    """One hop's method, body and the headers that describe the body."""

    method: str = "GET"
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    carries_secrets: bool = False  # the body holds the connection's secrets: only for origins they are bound to

    def after_redirect(self, status: int) -> OutgoingRequest:
        """The next hop's request: the same after a 307 or 308, else a GET without the body."""
        if status in BODY_KEEPING_REDIRECTS or self.method == "GET":
            return self
        return OutgoingRequest()


def outgoing_request(request: HttpRequest | None, credentials: HttpCredentials | None, credentials_bound: bool,
                     max_body_bytes: int) -> OutgoingRequest:
    """The first hop's request; raises :class:`RequestRefused` for a body over the cap, or one that names the
    connection when the source has none, or its credentials are not bound to the URL's origin."""
    if request is None:
        return OutgoingRequest()
    body = request.body_bytes(fill=_filler(credentials, credentials_bound))
    carries_secrets = body != request.body_bytes()
    if body is not None and len(body) > max_body_bytes:
        raise RequestRefused(f"the request body is {len(body)} bytes, more than max_request_body_bytes "
                             f"({max_body_bytes}): not sent")
    headers = dict(request.headers)
    if request.content_type is not None:
        headers["Content-Type"] = request.content_type
    return OutgoingRequest(request.method, body, headers, carries_secrets)


def _filler(credentials: HttpCredentials | None, bound: bool) -> Callable[[str], str]:
    def fill(text: str) -> str:
        if "${connection." not in text:
            return text
        if credentials is None:
            raise RequestRefused("the request body names ${connection....} but the source has no "
                                 "http_connection_id: not sent")
        if not bound:
            raise RequestRefused("the request body names the connection's secrets but its credentials are not bound "
                                 "to this URL's origin: not sent")
        filled = _CONNECTION_PLACEHOLDER.sub(lambda match: _secret(credentials, match), text)
        if "${connection." in _CONNECTION_PLACEHOLDER.sub("", text):  # a name the connection cannot have
            raise RequestRefused("the request body names a ${connection....} placeholder other than login, "
                                 "password or headers.NAME: not sent")
        return filled

    return fill


def _secret(credentials: HttpCredentials, match: re.Match[str]) -> str:
    name, header = match.group(1), match.group(2)
    value: str | None
    if header is not None:
        value = next((text for key, text in credentials.headers.items() if key.lower() == header.lower()), None)
    elif credentials.auth is None:
        value = None
    else:
        value = credentials.auth[0] if name == "login" else credentials.auth[1]
    if value is None:
        raise RequestRefused(f"the request body names ${{connection.{name}}}, which the connection "
                             f"{credentials.connection_id!r} does not have: not sent")
    return value


def credential_headers(credentials: HttpCredentials) -> dict[str, str]:
    """The headers an HTTP connection adds: its extras' headers, its cookies, and basic auth."""
    headers = dict(credentials.headers)
    if credentials.cookies:
        headers["Cookie"] = "; ".join(f"{key}={value}" for key, value in credentials.cookies.items())
    if credentials.auth is not None:
        token = base64.b64encode(f"{credentials.auth[0]}:{credentials.auth[1]}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    return headers


class KeptCredentials:
    """Sources' ``http_connection_id`` resolved by the connection factory and kept
    :data:`CREDENTIALS_MEMORY_SECONDS`: the factory may ask Airflow (a metadata-database query, synchronous),
    which neither each request nor each browser context should pay. The HTTP fetcher's and the slot browser's."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[float, HttpCredentials]] = {}

    def of(self, source: SourceConfig) -> HttpCredentials | None:
        if source.http_connection_id is None:
            return None
        kept = self._kept.get(source.http_connection_id)
        if kept is not None and time.monotonic() - kept[0] < CREDENTIALS_MEMORY_SECONDS:
            return kept[1]
        credentials = resolve_http(source.http_connection_id)
        self._kept[source.http_connection_id] = (time.monotonic(), credentials)
        return credentials
