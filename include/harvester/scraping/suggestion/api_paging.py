"""How an API behind POST pages, read from one response and the body that asked for it (``listing.next``).

The shapes are the common ones: a GraphQL connection (Relay's ``pageInfo {endCursor hasNextPage}``, the
cursor going into the variable the body already names, ``after`` by default), a search answer with its page
and page count (Algolia's ``page``/``nbPages``, ``totalPages``), and an offset the body sends
(``offset``/``from``/``start``/``skip``) stepped by the page's size. Anything else gets no rule, said in a
note, and the user writes it (docs/sources.md, "Sources behind POST").
"""

from __future__ import annotations

from typing import Any

__all__ = ["next_request_rule", "unwrap_edges"]

CURSOR_VARIABLES = ("after", "cursor", "endCursor", "startCursor")
PAGE_COUNTS = ("nbPages", "totalPages", "pages", "pageCount", "total_pages", "page_count")
OFFSET_FIELDS = ("offset", "from", "start", "skip")
SIZE_FIELDS = ("first", "limit", "size", "hitsPerPage", "per_page", "perPage", "count")
MAX_SEARCH_DEPTH = 5


def next_request_rule(data: Any, body: Any, items: int) -> tuple[dict[str, Any] | None, str]:
    """The ``listing.next`` rule this response and ``body`` suggest, with why; (None, why not) when none fits."""
    if (path := _page_info(data, "", 0)) is not None:
        into = _cursor_variable(body)
        return ({"cursor": f"{path}.endCursor", "into": into, "while": f"{path}.hasNextPage"},
                f"next: a GraphQL connection: {path}.endCursor into {into} while {path}.hasNextPage")
    if isinstance(data, dict) and _is_number(data.get("page")):
        count = next((name for name in PAGE_COUNTS if _is_number(data.get(name))), None)
        if count is not None:
            return ({"page": "page", "into": "page", "while": f"page < {count}"},
                    f"next: pages by number: page + 1 into the body's page while page < {count}")
    if isinstance(body, dict):
        offset = next((name for name in OFFSET_FIELDS if _is_number(body.get(name))), None)
        size = next((body[name] for name in SIZE_FIELDS if _is_number(body.get(name))), None) or items
        if offset is not None and size:
            return ({"offset": int(size), "into": offset},
                    f"next: an offset: the body's {offset} plus {int(size)} (a page's size) each time")
    return None, "no cursor, page count or offset found in the response and the body: write listing.next by hand"


def unwrap_edges(path: str, items: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """A GraphQL connection's ``edges`` hold each item in ``node`` beside its cursor: the items are the nodes."""
    if all(isinstance(item.get("node"), dict) for item in items):
        return f"{path}[].node", [item["node"] for item in items]
    return path, items


def _page_info(data: Any, path: str, depth: int) -> str | None:
    """The JMESPath of the object holding ``endCursor`` and ``hasNextPage``, searched breadth-first enough."""
    if not isinstance(data, dict) or depth > MAX_SEARCH_DEPTH:
        return None
    if "endCursor" in data and "hasNextPage" in data:
        return path or "@"
    for key, value in data.items():
        if isinstance(key, str) and key.isidentifier() and (found := _page_info(
                value, f"{path}.{key}" if path else key, depth + 1)) is not None:
            return found
    return None


def _cursor_variable(body: Any) -> str:
    """Where the cursor goes: the variable the body names for it, else ``variables.after`` (GraphQL's)."""
    variables = body.get("variables") if isinstance(body, dict) else None
    if isinstance(variables, dict):
        named = next((name for name in CURSOR_VARIABLES if name in variables), "after")
        return f"variables.{named}"
    if isinstance(body, dict):
        return next((name for name in CURSOR_VARIABLES if name in body), "variables.after")
    return "variables.after"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
