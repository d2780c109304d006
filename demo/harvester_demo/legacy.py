"""Pages as older real sites write them: listings whose links carry a fresh session id on every render
(``;jsessionid=`` in the path, ``PHPSESSID`` in the query), and item pages in windows-1252 or Shift_JIS that
name their charset nowhere (no header charset, no ``<meta>``, no BOM).

- ``/legacy/shop?page=N``: items ``3N-2`` to ``3N+3``, so neighbouring pages share three items, each render
  with new session ids; a next link while ``N < LEGACY_PAGES``;
- ``/legacy/item/{id}``: odd ids in windows-1252 (French), even ids in Shift_JIS (Japanese), served as
  ``text/html`` with no charset; the name and description of :func:`legacy_facts`.
"""

from __future__ import annotations

import html
import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

LEGACY_PAGES = 3
LEGACY_ITEMS = 3 * LEGACY_PAGES + 3
_FRENCH = ("Crème brûlée à la maison", "Île flottante façon grand-mère", "Bûche de Noël au chocolat noir",
           "Tarte Tatin aux pommes caramélisées")
_JAPANESE = ("抹茶のロールケーキ", "黒ごまのプリン", "桜餅と季節の和菓子", "北海道産小豆のどら焼き")


def legacy_facts(item_id: int) -> dict[str, Any]:
    """What an item page says, and the charset it is written in (tests compare the stored text with it)."""
    if item_id % 2:
        name = f"{_FRENCH[item_id % len(_FRENCH)]} n° {item_id}"
        description = ("Préparée chaque matin dans notre atelier, à déguster fraîche. Crème, œufs et sucre "
                       "de canne ; très appréciée des clients fidèles, déjà épuisée le week-end.")
        return {"name": name, "description": description, "charset": "cp1252", "sku": f"LEG-{item_id:04d}"}
    name = f"{_JAPANESE[item_id % len(_JAPANESE)]} その{item_id}"
    description = ("毎朝工房で手作りしています。季節の素材を使い、甘さを控えめに仕上げました。"
                   "お早めにお召し上がりください。週末は売り切れることがあります。")
    return {"name": name, "description": description, "charset": "shift_jis", "sku": f"LEG-{item_id:04d}"}


def _session_link(path: str, query: str = "") -> str:
    """``path`` as a cookie-less site writes it: its session id in a path parameter and in the query."""
    session = secrets.token_hex(16).upper()
    php_session = secrets.token_hex(13)
    joined = f"{query}&amp;" if query else ""
    return f"{path};jsessionid={session}?{joined}PHPSESSID={php_session}"


def legacy_routes(page: Any) -> list[Route]:
    async def shop(request: Request) -> HTMLResponse:
        number = max(1, min(LEGACY_PAGES, int(request.query_params.get("page", "1") or 1)))
        first = 3 * number - 2
        items = "".join(
            f'<li><a class="item-link" href="{_session_link(f"/legacy/item/{item_id}")}">'
            f"{html.escape(legacy_facts(item_id)['sku'])}</a></li>" for item_id in range(first, first + 6))
        following = (f'<a class="next" rel="next" href="{_session_link("/legacy/shop", f"page={number + 1}")}">'
                     "Next</a>" if number < LEGACY_PAGES else "")
        return HTMLResponse(page(f"Legacy shop page {number}", f'<ul class="items">{items}</ul>{following}'))

    async def item(request: Request) -> Response:
        item_id = int(request.path_params["item_id"])
        if not 1 <= item_id <= LEGACY_ITEMS:
            return Response(b"not found", status_code=404, headers={"content-type": "text/plain"})
        facts = legacy_facts(item_id)
        document = (f"<!DOCTYPE html><html><head><title>{html.escape(facts['name'])}</title></head><body>"
                    f'<h1 class="name">{html.escape(facts["name"])}</h1><span class="sku">{facts["sku"]}</span>'
                    f'<p class="description">{html.escape(facts["description"])}</p></body></html>')
        # "text/html" and nothing else: Starlette adds "; charset=utf-8" to a media type it is given
        return Response(document.encode(facts["charset"]), headers={"content-type": "text/html"})

    return [Route("/legacy/shop", shop), Route("/legacy/item/{item_id:int}", item)]
