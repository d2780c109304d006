"""Selectors over the page's own data: jsonld, microdata, meta, script_json, json, listing records,
each checked against the demo site's truth (``product_facts``), and the hostile inputs they must survive."""

from __future__ import annotations

import resource
import time
from decimal import Decimal
from pathlib import Path

import pytest
from harvester.config.loader import parse_source
from harvester.config.model import SourceConfig
from harvester.errors import SourceConfigError
from harvester.scraping.discovery.links import discover_links
from harvester.scraping.extraction import structured
from harvester.scraping.extraction.extractor import extract_listing_records, extract_record
from harvester.scraping.extraction.structured import DataBounds, PageData, nesting_depth
from harvester_demo.app import DemoSite, create_app, product_facts
from harvester_demo.structured import BRAND
from starlette.testclient import TestClient

pytestmark = pytest.mark.unit
SITE = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def demo() -> TestClient:
    """The demo site's app in process (its pages, not its timing): page bodies for unit tests."""
    return TestClient(create_app(DemoSite(latency_ms=0, slow_every=0)))


def source(attributes: dict | None = None, **fields) -> SourceConfig:
    return SourceConfig.model_validate({"name": "t", "input": {"seeds": [f"{SITE}/"]},
                                        **({"attributes": attributes} if attributes else {}), **fields})


def page(demo: TestClient, path: str, content: str = "html") -> PageData:
    return PageData(demo.get(path).text, SITE + path, content)


def price(product_id: int) -> dict:
    return {"amount": Decimal(f"{product_facts(product_id)['price']:.2f}"), "currency": "EUR"}


def test_jsonld_reads_a_graph_and_a_list_with_a_type_filter(demo: TestClient) -> None:
    facts = product_facts(7)
    product = {"type": "Product"}
    extraction = extract_record(source({
        "title": {"jsonld": {**product, "path": "name"}}, "sku": {"jsonld": {**product, "path": "sku"}},
        "price": {"jsonld": {**product, "path": "offers"}, "type": "price"},
        "in_stock": {"jsonld": {**product, "path": "offers.availability"}, "type": "bool"},
        "stock": {"jsonld": {**product, "path": "offers.inventoryLevel.value"}, "type": "int"},
        "modified": {"jsonld": {**product, "path": "dateModified"}, "type": "datetime"},
        "image": {"jsonld": {**product, "path": "image"}, "type": "url"},
        "organisation": {"jsonld": {"type": "Organization", "path": "name"}},  # from the second block, a list
        "types": {"jsonld": "\"@type\"", "type": "list[str]"},  # every item of both blocks, @graph flattened
    }), page(demo, "/ld/product/7"), f"{SITE}/ld/product/7")
    record = extraction.record
    assert extraction.problems == []
    assert (record["title"], record["sku"], record["stock"]) == (facts["title"], facts["sku"], facts["stock"])
    assert record["price"] == price(7) and record["in_stock"] is facts["in_stock"]
    assert record["modified"].isoformat() == f"{facts['released'].isoformat()}T07:30:00+00:00"
    assert record["image"] == f"{SITE}/static/img/7.png" and record["organisation"] == BRAND
    assert record["types"] == ["WebPage", "Product", "BreadcrumbList", "Organization", "WebSite"]


def test_microdata_meta_and_script_json_give_the_same_product(demo: TestClient) -> None:
    facts = product_facts(11)
    cases = {
        "/md/product/11": {"sku": {"microdata": {"type": "Product", "path": "sku"}},
                           "title": {"microdata": "name"}, "brand": {"microdata": "brand.name"},
                           "price": {"microdata": "offers", "type": "price"},
                           "in_stock": {"microdata": "offers.availability", "type": "bool"},
                           "released": {"microdata": "releaseDate", "type": "date"}},
        "/og/product/11": {"sku": {"meta": "product:retailer_item_id"}, "title": {"meta": "og:title"},
                           "price": {"meta": "product:price:amount", "type": "price", "currency": "EUR"},
                           "in_stock": {"meta": "product:availability", "type": "bool"},
                           "card": {"meta": "twitter:card"}},
        "/next/product/11": {"sku": {"script_json": {"script": "script#__NEXT_DATA__",
                                                     "path": "props.pageProps.product.sku"}},
                             "price": {"script_json": {"script": "script#__NEXT_DATA__",
                                                       "path": "props.pageProps.product.price"}, "type": "price"},
                             "tags": {"script_json": {"script": "script#__NEXT_DATA__",
                                                      "path": "props.pageProps.product.tags"}, "type": "list[str]"}},
        "/nuxt/product/11": {"sku": {"script_json": {"script": "script:contains('__NUXT__')",
                                                     "path": "data[0].product.sku"}},
                             "title": {"script_json": {"script": "xpath://script[contains(., '__NUXT__')]",
                                                       "path": "data[0].product.title"}},
                             "price": {"script_json": {"script": "script:contains('__NUXT__')",
                                                       "path": "data[0].product.price"}, "type": "price",
                                       "currency": "EUR"},
                             "in_stock": {"script_json": {"script": "script:contains('__NUXT__')",
                                                          "path": "data[0].product.inStock"}, "type": "bool"},
                             "tags": {"script_json": {"script": "script:contains('__NUXT__')",
                                                      "path": "data[0].product.tags"}, "type": "list[str]"}},
    }
    truth = {"sku": facts["sku"], "title": facts["title"], "brand": BRAND, "price": price(11),
             "in_stock": facts["in_stock"], "tags": facts["tags"], "card": "summary"}
    for path, attributes in cases.items():
        extraction = extract_record(source(attributes), page(demo, path), SITE + path)
        assert extraction.problems == [], (path, extraction.problems)
        for name, value in extraction.record.items():
            if name == "released":
                assert value.date() == facts["released"], path
            elif name != "url":
                assert value == truth[name], (path, name)


def test_json_responses_and_their_records_and_next_link(demo: TestClient) -> None:
    detail = source({"sku": "json:product.sku", "price": {"json": "product.price", "type": "price"},
                     "released": {"json": "product.released", "type": "datetime"},
                     "tags": {"json": "product.tags", "type": "list[str]"}}, content="json")
    record = extract_record(detail, page(demo, "/api/product/4", "json"), f"{SITE}/api/product/4").record
    assert record["sku"] == product_facts(4)["sku"] and record["price"] == price(4)
    assert record["tags"] == product_facts(4)["tags"] and record["released"].tzinfo is not None
    listing = source(content="json", listing={
        "next_page_selectors": ["json:links.next"],
        "records": {"item": "json:items", "key": ["sku"],
                    "attributes": {"sku": "json:sku", "price": {"json": "price", "type": "price"}}}})
    assert listing.output.key == ["sku"]  # the records' key is the collection's
    data = page(demo, "/api/products?per_page=5", "json")
    records = extract_listing_records(listing, data, data.url)
    assert [r["sku"] for r in records.records] == [product_facts(n)["sku"] for n in range(1, 6)]
    assert records.records[2]["price"] == price(3)
    assert discover_links(listing, data.url, data, 0).listings == [f"{SITE}/api/products?page=2&per_page=5"]


def test_listing_records_from_item_elements_and_from_an_item_list(demo: TestClient) -> None:
    by_css = source(listing={"next_page_selectors": ["a.next"], "records": {
        "item": "li.card", "key": ["sku"],
        "attributes": {"sku": "span.code", "title": "h2.name", "price": {"css": ".amount", "type": "price"},
                       "stock": {"css": ".left", "type": "int"},
                       "since": {"css": "time.since", "type": "date", "format": "%d.%m.%Y"},
                       "link": {"css": "a.card-link::attr(href)", "type": "url"}}}})
    by_data = source(listing={"records": {
        "item": {"jsonld": {"type": "ItemList", "path": "itemListElement[].item"}}, "key": ["sku"],
        "attributes": {"sku": "json:sku", "title": "json:name", "price": {"json": "offers", "type": "price"},
                       "stock": {"json": "offers.inventoryLevel.value", "type": "int"},
                       "since": {"json": "releaseDate", "type": "date"}, "link": {"json": "url", "type": "url"}}}})
    data = page(demo, "/catalog?page=2&per_page=10")
    first, second = (extract_listing_records(s, data, data.url) for s in (by_css, by_data))
    assert first.items == second.items == 10 and first.problem is None
    assert first.records == second.records  # two shapes of one listing, the same records
    facts = product_facts(11)
    assert first.records[0] == {"url": data.url, "sku": facts["sku"], "title": facts["title"], "price": price(11),
                                "stock": facts["stock"], "since": first.records[0]["since"],
                                "link": f"{SITE}/ld/product/11"}
    assert first.records[0]["since"].date() == facts["released"]


def test_structured_data_is_parsed_once_per_page(demo: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = structured.parse_json_text
    monkeypatch.setattr(structured, "parse_json_text", lambda text, *a, **k: calls.append(text) or real(text, *a, **k))
    attributes = {f"a{n}": {"jsonld": {"type": "Product", "path": "sku"}} for n in range(8)}
    attributes.update({f"s{n}": {"script_json": {"script": "script#__NEXT_DATA__", "path": "page"}} for n in range(4)})
    data = page(demo, "/ld/product/2")
    data.text = data.text.replace("</main>", demo.get("/next/product/2").text.split("<main>")[1])
    extract_record(source(attributes), data, data.url)
    assert len(calls) == 3  # two JSON-LD blocks and one script, for twelve attributes


def test_exactly_one_selector_kind_and_kinds_that_fit_the_content() -> None:
    for attributes, reason in [
        ({"t": {"css": "h1", "jsonld": "name"}}, "give exactly one selector kind"),
        ({"t": {"type": "int"}}, "give exactly one selector kind"),
        ({"t": "json:name"}, "json: reads JSON responses; set content: json"),
    ]:
        with pytest.raises(SourceConfigError, match=reason):
            parse_source(f"name: t\ninput: {{seeds: ['{SITE}/']}}\nattributes: {attributes}\n".replace("'", '"'))
    with pytest.raises(SourceConfigError, match="reads its responses with json:"):
        parse_source(f"name: t\ncontent: json\ninput: {{seeds: ['{SITE}/']}}\nattributes: {{t: h1}}\n")
    with pytest.raises(ValueError, match="items are an element"):
        source(listing={"records": {"item": "li", "key": ["t"], "attributes": {"t": "json:name"}}})
    with pytest.raises(ValueError, match="not an attribute of the records"):
        source(listing={"records": {"item": "li", "key": ["sku"], "attributes": {"t": "h2"}}})


def test_a_bad_jmespath_expression_is_reported_as_file_line_field_reason(tmp_path: Path) -> None:
    path = tmp_path / "shop.yaml"
    path.write_text(f"name: shop\ninput:\n  seeds: ['{SITE}/']\nattributes:\n  title: {{jsonld: 'name'}}\n"
                    "  price:\n    jsonld: {type: Product, path: 'offers[?price > `1`'}\n    type: price\n")
    from harvester.config.loader import load_source_file

    with pytest.raises(SourceConfigError) as raised:
        load_source_file(path)
    problem = raised.value.problems[0]
    assert (problem.line, problem.field) == (7, "attributes.price.jsonld.path")
    assert problem.reason.startswith("not a valid JMESPath expression 'offers[?price > `1`': ")
    assert "\n" not in str(problem) and str(problem).startswith(f"{path}:7: attributes.price.jsonld.path: ")


# -- hostile inputs -----------------------------------------------------------------------------------------
def test_a_5_mb_json_ld_blob_is_refused_fast_and_small() -> None:
    blob = '{"@type": "Product", "name": "N", "pad": [' + ",".join(['"' + "x" * 90 + '"'] * 55_000) + "]}"
    assert len(blob) > 5_000_000
    html = f'<html><head><script type="application/ld+json">{blob}</script></head><body><h1>N</h1></body></html>'
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.process_time()
    extraction = extract_record(source({"name": {"jsonld": "name", "required": True}, "h": "h1"}),
                                PageData(html, SITE, bounds=DataBounds()), SITE)
    elapsed = time.process_time() - started
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert extraction.record is None and "name: too_large" in extraction.rejected_reason
    assert "max_embedded_json_bytes" in extraction.rejected_reason
    assert elapsed < 1.0, elapsed  # never parsed: 5 MB of JSON as Python objects is ~60 MB and ~0.3 s
    assert grown_mb < 60, grown_mb


def test_the_structured_data_bounds_are_the_settings_process_page_is_given() -> None:
    """The worker hands process_page its settings: the markup caps and URL lengths were read from them, the
    structured-data bounds from the process's own (get_settings), whatever the worker was given."""
    from harvester.scraping.fetching.fetcher import FetchResult
    from harvester.scraping.page import process_page
    from harvester.settings import HarvesterSettings

    html = f'<script type="application/ld+json">{{"name": "N", "pad": "{"x" * 3000}"}}</script>'
    attributes = {"t": {"jsonld": "name"}}
    tight = process_page(source(attributes), "details", SITE, 0, FetchResult(SITE, "ok", text=html),
                         settings=HarvesterSettings(max_embedded_json_bytes=1024))
    roomy = process_page(source(attributes), "details", SITE, 0, FetchResult(SITE, "ok", text=html),
                         settings=HarvesterSettings(max_embedded_json_bytes=4096))
    assert [problem.kind for problem in tight.extraction.problems] == ["too_large"]
    assert roomy.extraction.record["t"] == "N"


def test_the_value_and_page_budgets_are_the_settings_process_page_is_given() -> None:
    """Likewise max_value_length and max_extracted_characters, on detail pages and listing records: they came
    from the process's get_settings, not the worker's settings."""
    from harvester.scraping.fetching.fetcher import FetchResult
    from harvester.scraping.page import process_page
    from harvester.settings import HarvesterSettings

    html = f'<ul><li class="item"><b class="k">K1</b><p class="t">{"x" * 1500}</p></li></ul>'
    listing = {"link_selectors": ["a"], "records": {"item": {"css": "li.item"}, "key": ["k"],
                                                    "attributes": {"k": {"css": "b.k"}, "t": {"css": "p.t"}}}}
    for settings in (HarvesterSettings(max_value_length=100), HarvesterSettings(max_extracted_characters=1024)):
        attributes = {"k": {"css": "b.k"}, "t": {"css": "p.t"}}
        detail = process_page(source(attributes), "details", SITE, 0, FetchResult(SITE, "ok", text=html),
                              settings=settings)
        records = process_page(source(attributes, input={"kind": "listing", "seeds": [SITE]},
                                      listing=listing), "listing", SITE, 0, FetchResult(SITE, "ok", text=html),
                               settings=settings)
        assert detail.extraction.record["t"] is None, settings
        assert [record.get("t") for record in records.listing_records.records] == [None], settings


@pytest.mark.parametrize("payload", ["[" * 200_000 + "]" * 200_000, "{\"a\":" * 50_000 + "1" + "}" * 50_000,
                                     "[" * 1_000_000])
def test_deep_nesting_never_reaches_a_parser(payload: str) -> None:
    bounds = DataBounds()
    for html in (f'<script type="application/ld+json">{payload}</script>',
                 f"<script>window.__STATE__ = {payload};</script>"):
        data = PageData(html, SITE, bounds=bounds)
        attributes = {"ld": {"jsonld": "a"}, "js": {"script_json": {"script": "script:contains('__STATE__')",
                                                                   "path": "a"}}}
        started = time.process_time()
        extraction = extract_record(source(attributes), data, SITE)
        assert time.process_time() - started < 2.0
        kinds = {problem.kind for problem in extraction.problems}
        assert kinds == {"too_deep", "missing"}, extraction.problems
    response = PageData(payload, SITE, "json", bounds=bounds)
    with pytest.raises(structured.StructuredDataError, match="max_json_depth"):
        response.json  # noqa: B018


def test_nesting_depth_ignores_brackets_in_strings_and_is_linear() -> None:
    assert nesting_depth('{"a": "[[[[", "b": [1, {"c": \'}}}\'}]}') == 3
    started = time.process_time()
    assert nesting_depth('{"k": "' + "[" * 3_000_000 + '"}') == 1
    assert time.process_time() - started < 1.0
