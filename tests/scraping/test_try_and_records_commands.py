"""`harvester try --html FILE [--url URL]` (what each selector matched, the first problem per attribute) and
`harvester records SOURCE` (a source's latest records)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from harvester.cli import main
from harvester_demo.app import DemoSite, create_app, product_facts
from starlette.testclient import TestClient

SOURCE = """\
name: saved_page
input: {seeds: ["http://127.0.0.1:9/ld/product/1"]}
attributes:
  title: {jsonld: {type: Product, path: name}, required: true}
  price: {jsonld: {type: Product, path: offers}, type: price}
  photo: {css: "img.nothere::attr(src)", type: url}
  link: {css: "a.card-link::attr(href)", type: url}
"""


@pytest.mark.unit
def test_try_reads_a_saved_page_and_shows_each_selector_and_its_first_problem(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo = TestClient(create_app(DemoSite(latency_ms=0)))
    saved = tmp_path / "page.html"
    saved.write_text(demo.get("/ld/product/5").text.replace("</main>", '<a class="card-link" href="/x/5">5</a></main>'))
    (tmp_path / "saved.yaml").write_text(SOURCE)
    url = "https://shop.example.com/ld/product/5"
    assert main(["try", str(tmp_path / "saved.yaml"), "--html", str(saved), "--url", url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["render"] == "file" and report["url"] == url
    assert report["record"]["title"] == product_facts(5)["title"]
    assert report["record"]["price"] == {"amount": f"{product_facts(5)['price']:.2f}", "currency": "EUR"}
    assert report["record"]["link"] == "https://shop.example.com/x/5"  # relative to --url
    selectors = report["selectors"]
    assert selectors["title"] == {"selector": "jsonld: name (type Product)", "matched": 1,
                                  "samples": [product_facts(5)["title"]], "value": product_facts(5)["title"],
                                  "problem": None}
    assert selectors["photo"]["matched"] == 0
    assert selectors["photo"]["problem"] == "photo: missing (the selector matched nothing)"
    assert main(["try", str(tmp_path / "saved.yaml"), "--html", str(saved), "--url", url]) == 0
    text = capsys.readouterr().out
    assert "jsonld: offers (type Product)" in text and "problem: photo: missing" in text
    assert main(["try", str(tmp_path / "saved.yaml"), "--html", str(tmp_path / "none.html")]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.integration
def test_records_prints_a_sources_latest_records(configure_settings, mongo_server,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from datetime import UTC, datetime, timedelta

    from harvester.config.loader import load_source_file
    from harvester.storage.data_handler import DataHandler

    settings = configure_settings()
    path = settings.sources_dir / "saved_page.yaml"
    path.write_text(SOURCE + "output: {key: [title]}\n")
    source = load_source_file(path)
    handler = DataHandler(settings)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for number in range(3):
        handler.write(source, [{"url": f"http://a.example/{number}", "title": f"T{number}",
                                "price": {"amount": Decimal("12.50"), "currency": "EUR"}}], f"run-{number}",
                      now=start + timedelta(hours=number))
    assert main(["records", "saved_page", "--limit", "2", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["title"] for line in lines] == ["T2", "T1"]  # newest harvested first
    assert lines[0]["price"] == {"amount": "12.50", "currency": "EUR"}  # Decimal128, exact
    assert main(["records", "saved_page", "--run", "run-0"]) == 0
    out = capsys.readouterr().out
    assert "http://a.example/0" in out and "1 record(s) of saved_page" in out
    assert main(["records", "no_such_source"]) == 1
    handler.mark_gone(source, {"http://a.example/1": "HTTP 410"})
    assert main(["records", "saved_page", "--gone", "true", "--json"]) == 0
    gone = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["title"], line["gone_reason"]) for line in gone] == [("T1", "HTTP 410")]
    assert main(["records", "saved_page", "--gone", "false", "--json"]) == 0
    assert sorted(json.loads(line)["title"] for line in capsys.readouterr().out.splitlines()) == ["T0", "T2"]
    exported = settings.sources_dir.parent / "gone.jsonl"
    assert main(["export", "saved_page", "--gone", "true", "-o", str(exported), "--no-progress"]) == 0
    assert [json.loads(line)["gone_reason"] for line in exported.read_text().splitlines()] == ["HTTP 410"]


@pytest.mark.unit
def test_try_says_a_soft_404_is_gone_and_extracts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "gone.html"
    saved.write_text("<html><head><title>Sorry</title></head><body><h1>Product not found</h1></body></html>")
    (tmp_path / "saved.yaml").write_text(SOURCE + 'gone: {texts: ["product not found"]}\n')
    assert main(["try", str(tmp_path / "saved.yaml"), "--html", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "GONE: the page says 'product not found'" in out and "REJECTED" not in out


@pytest.mark.unit
def test_suggest_refuses_a_page_the_workers_would_refuse_before_parsing_it() -> None:
    """`harvester suggest` built its PageData itself and so skipped the markup check process_page runs before
    lxml (one element of 120,000 attributes took 71 s of CPU to parse): it now refuses such a page, saying why."""
    from harvester.scraping.fetching.fetcher import FetchResult
    from harvester.scraping.suggestion import SuggestError, Suggestion
    from harvester.scraping.suggestion.analysis import analyse

    url = "http://shop.example/p/1"
    attributes = " ".join(f"a{n}=x" for n in range(20_000))
    wide = FetchResult(url, "ok", text=f"<html><body><div {attributes}>x</div><h1>t</h1></body></html>",
                       content_type="text/html")
    with pytest.raises(SuggestError, match="max_attributes_per_element"):
        analyse(wide, Suggestion(url, "wide"), False)
    ordinary = FetchResult(url, "ok", text="<html><body><h1 class='title'>t</h1></body></html>",
                           content_type="text/html")
    assert "details" in analyse(ordinary, Suggestion(url, "ordinary"), False)


@pytest.mark.unit
def test_try_reads_no_more_of_a_saved_file_than_a_fetched_page_may_hold(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`try --html` read a whole file of any size into memory; it reads body_size_cap_bytes of it, as a fetch
    keeps of a page, and says the page was cut."""
    from harvester.settings import get_settings

    monkeypatch.setenv("HARVESTER_BODY_SIZE_CAP_BYTES", str(64 * 1024))
    get_settings.cache_clear()
    try:
        saved = tmp_path / "huge.html"
        with saved.open("w") as handle:
            handle.write("<html><body><h1>x</h1>" + "<p>filler</p>" * 200_000 + "</body></html>")  # 2.6 MB
        (tmp_path / "saved.yaml").write_text(SOURCE)
        assert main(["try", str(tmp_path / "saved.yaml"), "--html", str(saved), "--json"]) == 1  # no title in it
        report = json.loads(capsys.readouterr().out)
        assert report["bytes"] == 64 * 1024 and report["truncated"] is True
        assert "cut at 65536" in report["reason"]
    finally:
        get_settings.cache_clear()


@pytest.mark.unit
@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "example.com"])
def test_suggest_answers_a_url_that_is_not_http_with_one_line(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`suggest file:///...` ended in a pydantic traceback."""
    assert main(["suggest", url]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"harvester suggest: not an absolute http(s) URL: {url!r}\n"


@pytest.mark.unit
def test_try_warc_finds_a_url_spelled_otherwise_reads_its_latest_response_and_names_a_revisit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`try --warc FILE URL` looks the URL up as web archives do (by SURT: parameters in any order, ``www.``, the
    host's case), reads the file's latest response of it, and says when the file holds only a revisit of it (its
    payload is in an earlier file: a later run of an unchanged page) instead of "no response"."""
    from datetime import UTC, datetime

    from harvester.scraping import Exchange
    from harvester.storage import ArchivedPage
    from harvester.storage.archive_index import Original, PayloadLocation
    from harvester.storage.warc_records import WarcBatch, payload_digest

    def page(url: str, body: bytes) -> ArchivedPage:
        return ArchivedPage("t", "r", url, Exchange("GET", url, (), 200, (("Content-Type", "text/html"),), body),
                            datetime(2026, 12, 7, tzinfo=UTC))

    url = "https://shop.example.com/ld/product/5?colour=red&size=m"
    batch = WarcBatch("saved_page", "a.warc.gz", first_in_file=True)
    for version in (b"old", b"new"):  # fetched twice in one run: the later is the page as it is now
        body = b'<script type="application/ld+json">{"@type": "Product", "name": "%s"}</script>' % version
        batch.add(page(url, body), payload_digest(body), None)
    revisited = "https://shop.example.com/ld/product/6"
    original = Original(revisited, "2026-12-06T00:00:00.000000Z", PayloadLocation("file:///earlier.warc.gz", 0, 1))
    batch.add(page(revisited, b"same"), payload_digest(b"same"), original)
    warc = tmp_path / "a.warc.gz"
    warc.write_bytes(batch.data())
    (tmp_path / "saved.yaml").write_text(SOURCE)
    source = str(tmp_path / "saved.yaml")
    assert main(["try", source, "https://WWW.shop.example.com/ld/product/5?size=m&colour=red", "--warc", str(warc),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["render"] == "warc" and report["url"] == url and report["record"]["title"] == "new"
    assert main(["try", source, revisited, "--warc", str(warc)]) == 2
    error = capsys.readouterr().err
    assert "only a revisit" in error and "2026-12-06T00:00:00.000000Z" in error
    assert main(["try", source, "https://shop.example.com/ld/product/7", "--warc", str(warc)]) == 2
    assert "no response of https://shop.example.com/ld/product/7" in capsys.readouterr().err
