"""Requests with a method and a body (GraphQL, search APIs), and the rule that builds the next one from a
response (``listing.next``).

A POST's body is part of what the request IS: two queries to one endpoint are two pages, and a retried
POST is the same page. :func:`request_key` gives that identity as one string, the canonical URL with a
fragment naming the method and a digest of the canonical body (``https://shop/graphql#post-9f2c…``). A
canonical URL never has a fragment, so a key never collides with a GET's URL, and every place that keys
by URL (the duplicate-URL checker, listing pages of a run, planned task ids, packages) keys requests
with it unchanged.

Credentials never sit in a body: ``${connection.password}``, ``${connection.login}`` and
``${connection.extra.NAME}`` name the source's ``http_connection_id`` and are filled in by the fetcher
right before the request is sent, so the key, the registered copy, logs and records only ever hold the
placeholder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from harvester.config.attributes import StrictModel, compile_jmespath
from harvester.config.incremental import check_http_url
from harvester.urls import canonicalise_url

__all__ = ["MAX_BODY_DEPTH", "HttpRequest", "NextRequest", "RequestSeed", "body_path_parts", "check_request_rules",
           "request_key"]

MAX_BODY_DEPTH = 32  # a body nested deeper is refused: nobody writes one, and canonical JSON recurses
KEY_MARK = "#"
# Fetch outcomes of requests that never left the worker (robots.txt not readable, the host's turn not given)
NOT_SENT_OUTCOMES = frozenset({"robots_unavailable", "host_rate_wait", "skipped"})
TOO_MANY_REQUESTS = 429
FormValue = str | int | float | bool


class HttpRequest(StrictModel):
    """What a request sends besides its URL: the method, a JSON or form body, headers, and whether it may
    be sent again after a failure."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True)

    method: Literal["GET", "POST"] = Field(default="POST", description="GET or POST (the default).")
    json_body: Any = Field(
        default=None, alias="json",
        description="A JSON body (sent as application/json): a GraphQL {query, variables}, a search query.")
    form: dict[str, FormValue] | None = Field(
        default=None, description="A form body (sent as application/x-www-form-urlencoded).")
    headers: dict[str, str] = Field(default_factory=dict, description="Headers of this request only.")
    safe_to_repeat: bool = Field(
        default=True,
        description="True (the default): the request only reads (a query, a search), so a failed one is retried "
                    "like a GET; false: a failed request goes to dead letters at once (it may have changed "
                    "something), unless the site said it was not processed (429, or never sent).")

    @model_validator(mode="after")
    def _body_fits_method(self) -> HttpRequest:
        if self.json_body is not None and self.form is not None:
            raise ValueError("json: give a json body or a form body, not both")
        if self.method == "GET" and (self.json_body is not None or self.form is not None):
            raise ValueError("method: a GET sends no body; say method: POST")
        if self.json_body is not None:
            _check_depth(self.json_body, 0)
        return self

    def repeatable_after(self, outcome: str, status: int | None) -> bool:
        """Whether a request that failed so may be sent again: always when it only reads (``safe_to_repeat``);
        else only when the site cannot have acted on it: it was never sent, or the site said it was not
        processed (429, RFC 6585)."""
        return self.safe_to_repeat or outcome in NOT_SENT_OUTCOMES or status == TOO_MANY_REQUESTS

    @property
    def has_body(self) -> bool:
        return self.json_body is not None or self.form is not None

    @property
    def content_type(self) -> str | None:
        if self.json_body is not None:
            return "application/json"
        return "application/x-www-form-urlencoded" if self.form is not None else None

    def body_bytes(self, fill: Callable[[str], str] | None = None) -> bytes | None:
        """The body as sent. ``fill`` (text -> text) replaces connection placeholders in every string first."""
        from urllib.parse import urlencode

        if self.json_body is not None:
            body = _map_strings(self.json_body, fill) if fill is not None else self.json_body
            return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        if self.form is not None:
            pairs = {name: (fill(value) if fill is not None and isinstance(value, str) else _form_text(value))
                     for name, value in self.form.items()}
            return urlencode(pairs).encode()
        return None

    def identity(self) -> str:
        """The method and the canonical body (sorted keys, no spaces) as one digest: what makes two requests
        to one URL the same request. Headers are not part of it, as a GET's are not."""
        canonical = json.dumps({"method": self.method, "json": self.json_body, "form": self.form},
                               sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]

    def with_value(self, path: str, value: Any) -> HttpRequest:
        """A copy whose body holds ``value`` at the dotted ``path`` (created where missing)."""
        parts = body_path_parts(path)
        if self.form is not None:
            return self.model_copy(update={"form": {**self.form, parts[0]: value}})
        return self.model_copy(update={"json_body": _set_path(self.json_body or {}, parts, value)})

    def value_at(self, path: str) -> Any:
        """The body's value at the dotted ``path``, or None."""
        current: Any = self.form if self.form is not None else self.json_body
        for part in body_path_parts(path):
            if not isinstance(current, dict):
                return None
            current = current.get(part)
        return current


class RequestSeed(HttpRequest):
    """``input.requests[]``: a first request of a run, with its URL."""

    url: str = Field(description="The endpoint: an absolute http(s) URL.")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        check_http_url(value)
        return value

    @property
    def request(self) -> HttpRequest:
        """The request without its URL (what a task carries)."""
        return HttpRequest.model_validate(self.model_dump(exclude={"url"}, by_alias=True))

    @property
    def key(self) -> str:
        return request_key(self.url, self.request)


class NextRequest(StrictModel):
    """``listing.next``: the next request built from the response, by a cursor, a page number or an offset."""

    cursor: str | None = Field(
        default=None, description="JMESPath to the next cursor in the response (pageInfo.endCursor); "
                                  "no cursor: the last page.")
    page: str | None = Field(
        default=None, description="JMESPath to the response's page number; the next request asks for one more.")
    offset: int | None = Field(
        default=None, ge=1, description="The step of an offset: the next request's `into` is the current one "
                                        "plus this.")
    into: str = Field(
        min_length=1, pattern=r"^[A-Za-z_$][\w$-]*(\.[A-Za-z_$][\w$-]*){0,15}$",
        description="Where the value goes: a dotted path in the JSON body (variables.after), a form field, or, "
                    "for a request without a body, a query parameter of the URL.")
    while_: str | None = Field(
        default=None, alias="while",
        description="JMESPath over the response that must be true for a next request (pageInfo.hasNextPage, "
                    "page < nbPages); a page without records ends it as well.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True)

    @model_validator(mode="after")
    def _one_kind(self) -> NextRequest:
        given = [name for name in ("cursor", "page", "offset") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of cursor, page or offset")
        for name, expression in (("cursor", self.cursor), ("page", self.page), ("while", self.while_)):
            if expression is not None:
                try:
                    compile_jmespath(expression)
                except ValueError as error:
                    raise ValueError(f"{name}: {error}") from None
        return self


def check_request_rules(requests: list[RequestSeed], render: str, content: str, rule: NextRequest | None) -> None:
    """The cross-field rules of a source's ``input.requests`` and ``listing.next``; ``ValueError("<field>:
    <reason>")``. Given the fields, not the source: the model imports this module, never the reverse."""
    if requests and render != "http":
        raise ValueError("input.requests: requests with a method and a body are sent by the HTTP workers "
                         "(render: http); a browser loads pages by their URL")
    keys = [seed.key for seed in requests]
    if len(set(keys)) != len(keys):
        raise ValueError("input.requests: the same request (URL, method and body) is listed twice")
    if rule is not None and content != "json":
        raise ValueError("listing.next: the next request is read from a JSON response (content: json)")


def body_path_parts(path: str) -> list[str]:
    return path.split(".")


def request_key(url: str, request: HttpRequest | None) -> str:
    """The identity of a request: its canonical URL for a plain GET, else that URL with a fragment naming
    the method and the digest of its body (see the module's docstring)."""
    canonical = canonicalise_url(url) or url
    if request is None or (request.method == "GET" and not request.has_body):
        return canonical
    return f"{canonical}{KEY_MARK}{request.method.lower()}-{request.identity()}"


def _check_depth(value: Any, depth: int) -> None:
    if depth > MAX_BODY_DEPTH:
        raise ValueError(f"json: nested deeper than {MAX_BODY_DEPTH} levels")
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        _check_depth(child, depth + 1)


def _set_path(document: Any, parts: list[str], value: Any) -> Any:
    """A copy of ``document`` with ``value`` at ``parts`` (the original, kept by a frozen model, is untouched)."""
    copy = dict(document) if isinstance(document, dict) else {}
    if len(parts) == 1:
        copy[parts[0]] = value
    else:
        copy[parts[0]] = _set_path(copy.get(parts[0]), parts[1:], value)
    return copy


def _map_strings(value: Any, fill: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fill(value)
    if isinstance(value, dict):
        return {key: _map_strings(child, fill) for key, child in value.items()}
    if isinstance(value, list):
        return [_map_strings(child, fill) for child in value]
    return value


def _form_text(value: FormValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
