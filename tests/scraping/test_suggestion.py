"""`harvester suggest` on a shop built with CSS-in-JS (emotion's ``css-1x2y3z``, styled-components' ``sc-...``,
CSS Modules' ``Card_link__3kE9x``): class names hashed at build time change with the site's next deploy, so a
suggested selector must not lean on them. Served by a real loopback server (tests.fixtures.hostile_hosts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from harvester.cli import main
from harvester.scraping.suggestion.markup import css_of, generated_class
from parsel import Selector

pytestmark = pytest.mark.integration


def listing_page(build: str) -> str:
    """One build of the listing: the same links, the class hashes of that build."""
    cards = "".join(f'<div class="css-{build}a{n}c3"><a class="css-{build}z9" href="/p/{n}">Widget {n}</a>'
                    f'<span class="css-{build}pr">{n}.50</span></div>' for n in range(1, 6))
    return f"<html><body><div class='css-{build}root'>{cards}</div></body></html>"


def product_page(n: int) -> str:
    data = {"@context": "https://schema.org", "@type": "Product", "name": f"Widget {n}", "sku": f"SKU-{n}",
            "offers": {"@type": "Offer", "price": f"{n}.50", "priceCurrency": "EUR"}}
    return (f'<html><head><script type="application/ld+json">{json.dumps(data)}</script></head>'
            f'<body><div class="css-1x2y3z"><h2 class="css-9a8b7c">Widget {n}</h2></div></body></html>')


@pytest.mark.parametrize("name, generated", [
    ("css-1x2y3z", True), ("css-9a8b7c-Title", True), ("sc-bdVaJa", True), ("jsx-2856355498", True),
    ("Card_link__3kE9x", True), ("svelte-1ab2c3d", True),
    ("product-link", False), ("card__title", False), ("price", False), ("btn-primary", False), ("h2", False),
])
def test_generated_class_names_are_told_from_the_sites_own(name: str, generated: bool) -> None:
    assert generated_class(name) is generated


def test_css_of_prefers_a_class_the_site_named_and_skips_hashed_ones() -> None:
    anchor = Selector(text='<a class="css-1x2y3z product-link" href="/p/1">x</a>').css("a")[0]
    assert css_of(anchor) == "a.product-link"
    hashed = Selector(text='<a class="css-1x2y3z" href="/p/1">x</a>').css("a")[0]
    assert css_of(hashed) is None


def test_suggested_listing_of_a_hashed_shop_still_finds_its_links_after_the_next_build(
        site, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build = {"hash": "1q2w"}

    async def listing(request: web.Request) -> web.Response:
        return web.Response(text=listing_page(build["hash"]), content_type="text/html")

    site.route("/shop", listing)
    for n in range(1, 6):
        site.route(f"/p/{n}", text=product_page(n), content_type="text/html")
    path = tmp_path / "hashed.yaml"
    assert main(["suggest", f"{site.url}/shop", "--listing", "--name", "hashed", "-o", str(path)]) == 0
    suggested = yaml.safe_load(path.read_text())
    selectors = suggested["listing"]["link_selectors"]
    assert not any("css-" in selector for selector in selectors), selectors
    assert suggested["attributes"]["sku"]["jsonld"]["path"] == "sku"  # the detail page's data, not its classes

    build["hash"] = "8u7y"  # the site deployed again: every hashed class changed
    capsys.readouterr()
    main(["try", str(path), f"{site.url}/shop", "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sorted(report["follow_details"]) == [f"{site.url}/p/{n}" for n in range(1, 6)], report


def test_a_suggested_paginated_api_reads_past_the_default_depth(site, tmp_path: Path) -> None:
    """Under `make run` the suggested source of a paginated JSON API had no max_depth: the default, 2, read three
    pages of five and the run stayed green with 6 of 10 records (an HTML listing's suggestion says max_depth: 5)."""
    async def items(request: web.Request) -> web.Response:
        page = int(request.query.get("page", "1"))
        following = f"/api/items?page={page + 1}" if page < 5 else None
        return web.json_response({"items": [{"sku": f"API-{page}-{n}", "name": f"Item {n}"} for n in (1, 2)],
                                  "next": following})

    site.route("/api/items", items)
    path = tmp_path / "api.yaml"
    assert main(["suggest", f"{site.url}/api/items", "--listing", "--name", "api", "-o", str(path)]) == 0
    text = path.read_text()
    listing = yaml.safe_load(text)["listing"]
    assert listing["next_page_selectors"] == ["json:next"] and listing["max_depth"] >= 4, listing
    assert "max_depth: 5 pages deep" in text


def test_a_field_only_a_hashed_class_holds_is_suggested_with_a_warning(site, tmp_path: Path) -> None:
    """A page whose fields sit only in hashed classes: each is suggested (it says where the data is) with a
    warning to rename it and find a stable hook; the page's one <h1> is read as `h1`, not by its hash."""
    site.route("/p/1", content_type="text/html", text='<html><body><div class="css-1x2y3z">'
               '<h1 class="css-9a8b7c">Widget 1</h1><span class="css-q1w2e3">SKU-00001</span>'
               '<span class="css-p7r8c9">11.50 \u20ac</span></div></body></html>')
    path = tmp_path / "hashed_fields.yaml"
    assert main(["suggest", f"{site.url}/p/1", "--name", "hashed_fields", "-o", str(path), "--render", "http"]) == 0
    text = path.read_text()
    attributes = yaml.safe_load(text)["attributes"]
    assert attributes["title"] == {"css": "h1::text"}, attributes
    hashed = {name: spec for name, spec in attributes.items() if "css-" in spec["css"]}
    assert {spec["css"] for spec in hashed.values()} == {"span.css-q1w2e3::text", "span.css-p7r8c9::text"}
    assert text.count("WARNING: a class name the site's build hashed") == 2, text


def test_a_page_with_nothing_to_suggest_says_so_without_a_traceback(
        site, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Under `make run`, `harvester suggest` on a page whose fields a script writes after load ended in a
    SourceConfigError traceback ("attributes: give at least one attribute")."""
    site.route("/late/1", content_type="text/html", text='<html><body><h1></h1><span class="sku"></span>'
               "<script>setTimeout(() => {}, 400)</script></body></html>")
    capsys.readouterr()
    assert main(["suggest", f"{site.url}/late/1", "--render", "http", "-o", str(tmp_path / "late.yaml")]) == 1
    error = capsys.readouterr().err
    assert "no field found on the http page" in error and "harvester try" in error, error
    assert "Traceback" not in error and not (tmp_path / "late.yaml").exists()
