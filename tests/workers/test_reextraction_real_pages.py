"""Re-extraction over real pages: the Zyte benchmark's 140 product pages (62 hosts, many languages and charsets,
up to megabytes each) served over loopback the ways real sites serve them, harvested with the archive on, then
re-extracted from the archive alone. Every record must come back as the harvest stored it, field for field, with
no request to the server and no change written to the history: the archive keeps what the extraction read (the
decoded payload, the charset's evidence, the final URL a redirect led to), and nothing else decides a value.

Skips without ``../shared/corpora`` (a user's clone has none)."""

from __future__ import annotations

import gzip
import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from harvester.config import SourceConfig
from harvester.distributor import TaskMessage
from harvester.producer.reextraction import Reextraction
from harvester.workers.batch import BatchRunner

from tests.corpora import corpora_folder
from tests.fixtures.servers import VENV_BIN
from tests.workers.conftest import Crawl
from tests.workers.test_archive import replaying, run_until_idle
from tests.workers.test_batch import records

pytestmark = pytest.mark.integration

CORPORA = corpora_folder()
PAGES = sorted((CORPORA / "zyte-products" / "html").glob("*.html.gz")) if CORPORA is not None else []

# What a product page commonly says about itself, through every kind of selector the configs use: the values come
# from the page's text, attributes, URLs resolved against the page's own (final) URL, <meta>, JSON-LD and
# microdata, so each depends on how the archived page decodes and where it says it came from.
ATTRIBUTES: dict[str, Any] = {
    "title": {"css": "title", "strip": True},
    "heading": {"css": "h1", "strip": True},
    "canonical": {"css": "link[rel=canonical]::attr(href)", "type": "url"},
    "image": {"meta": "og:image", "type": "url"},
    "description": {"meta": "description"},
    "links": {"css": "a::attr(href)", "type": "list[url]"},
    "words": {"css": "body ::text", "join": " ", "strip": True},
    "jsonld_name": {"jsonld": {"path": "name", "type": "Product"}},
    "jsonld_price": {"jsonld": {"path": "offers.price || offers[0].price", "type": "Product"}},
    "microdata_price": {"microdata": {"path": "offers.price || offers[0].price", "type": "Product"}},
    "price": {"css": "[itemprop=price]::attr(content)", "type": "price"},
}


def served(number: int, body: bytes) -> tuple[dict[str, str], bytes]:
    """How page ``number`` is served: the ways of real sites, in turn. No charset in the Content-Type (the page's
    own declaration or its bytes decide); or a charset named in the header only: a UTF-8 page whose text fits
    windows-1252 re-encoded to it (what a legacy server does; the page's own ``<meta charset>``, if any, is then
    wrong and the header wins), another UTF-8 page named UTF-8; a gzip transfer encoding; a session cookie."""
    headers = {"Content-Type": "text/html"}
    if number % 2:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and not text.isascii() and number % 4 == 1:
            try:
                body, headers["Content-Type"] = text.encode("cp1252"), "text/html; charset=windows-1252"
            except UnicodeEncodeError:
                headers["Content-Type"] = "text/html; charset=utf-8"
        elif text is not None:
            headers["Content-Type"] = "text/html; charset=utf-8"
    if number % 3 == 0:
        headers["Content-Encoding"] = "gzip"
        body = gzip.compress(body, 1)
    if number % 5 == 0:
        headers["Set-Cookie"] = f"session=s{number}; Path=/; HttpOnly"
    return headers, body


class RealPages(BaseHTTPRequestHandler):
    """``/page/<n>``: the n-th corpus page; ``/go/<n>``: a redirect to it (the record is the page's, its relative
    URLs resolved against the page's URL, not the one asked for)."""

    bodies: list[bytes] = []
    requests = 0
    lock = threading.Lock()

    def do_GET(self) -> None:
        with RealPages.lock:
            RealPages.requests += 1
        kind, _, number_text = self.path.strip("/").partition("/")
        number = int(number_text) if number_text.isdigit() else -1
        if not 0 <= number < len(self.bodies):
            self.send_error(404)
            return
        if kind == "go":
            self.send_response(302)
            self.send_header("Location", f"/page/{number}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        headers, body = served(number, self.bodies[number])
        self.send_response(200)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *arguments: Any) -> None:
        pass


@pytest.fixture
def real_site() -> Iterator[str]:
    if not PAGES:
        pytest.skip("../shared/corpora/zyte-products is absent (only the project's own machines have it)")
    RealPages.bodies = [gzip.decompress(path.read_bytes()) for path in PAGES]
    RealPages.requests = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), RealPages)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def page_url(site: str, number: int) -> str:
    return f"{site}/go/{number}" if number % 4 == 0 else f"{site}/page/{number}"


TEXT_ATTRIBUTES = ("title", "heading", "description", "words", "jsonld_name", "jsonld_price", "microdata_price",
                   "price")  # what does not depend on where the page is served from


@pytest.fixture
def harvested(real_site, configure_settings, redis_client, mongo_server, tmp_path: Path):
    """Every corpus page harvested once, the archive on: (settings, source, each record's attributes by URL)."""
    settings = configure_settings(allowed_private_networks="127.0.0.0/8", body_size_cap_bytes=8 * 1024 * 1024,
                                  retry_base_seconds=0.2, retry_max_seconds=1, lease_seconds=60)
    document = {"name": "real_pages", "input": {"seeds": [f"{real_site}/page/0"], "kind": "details"},
                "attributes": ATTRIBUTES, "robots": "ignore", "rate_limit": {"max_active": 8, "per_minute": 100_000},
                "timeout": 30, "output": {"key": ["url"], "history": True, "archive": {
                    "enabled": True, "location": f"file://{tmp_path / 'archive'}"}}}
    (settings.sources_dir / "real_pages.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    source = SourceConfig.model_validate(document)
    runner = BatchRunner(settings)
    try:
        crawl = Crawl(runner, redis_client)
        crawl.push(source, *(TaskMessage(source=source.name, kind="details", url=page_url(real_site, number),
                                         run_id="real") for number in range(len(PAGES))))
        run_until_idle(crawl, source)
    finally:
        runner.close()
    stored = {record["url"]: {name: record.get(name) for name in ATTRIBUTES}
              for record in records(mongo_server, settings, source).find()}
    assert set(stored) == {f"{real_site}/page/{number}" for number in range(len(PAGES))}  # (the final URLs)
    filled = {name: sum(1 for values in stored.values() if values[name] not in (None, [], "")) for name in ATTRIBUTES}
    assert min(filled.values()) > 0, filled  # every kind of selector found something on some real page
    return settings, source, stored


def test_real_pages_reextracted_from_the_archive_give_back_every_record_their_harvest_stored(
        real_site, harvested, mongo_server) -> None:
    settings, source, stored = harvested
    requests = RealPages.requests

    report = Reextraction.from_settings(settings).run(source, archived_run="real")

    assert RealPages.requests == requests and report["requests"] == 0  # nothing reached the site
    assert report["pages_read"] == len(PAGES) and report["records_stored"] == len(PAGES), report
    collection = records(mongo_server, settings, source)
    reextracted = {record["url"]: {name: record.get(name) for name in ATTRIBUTES} for record in collection.find()}
    differing = {url: {name: (stored[url][name], values[name]) for name in ATTRIBUTES
                       if values[name] != stored[url][name]}
                 for url, values in reextracted.items() if values != stored[url]}
    assert not differing, f"{len(differing)} records changed: {list(differing.items())[:3]}"
    assert report["records_changed"] == 0, report
    history = mongo_server.client()[settings.mongo_database][f"{source.output_collection}_history"]
    assert history.count_documents({"run_id": report["run_id"]}) == 0


def test_a_replayed_real_run_answers_harvester_try_as_the_site_did(real_site, harvested) -> None:
    """Replayed pages keep what decides their text: a page re-encoded to windows-1252 (named in the header only), a
    gzip-encoded one, one reached through a redirect."""
    _, source, stored = harvested
    legacy = next(number for number, body in enumerate(RealPages.bodies)
                  if "1252" in served(number, body)[0]["Content-Type"])
    encoded = next(number for number in range(len(PAGES)) if number % 3 == 0 and number % 4)
    redirected = next(number for number in range(len(PAGES)) if number % 4 == 0 and stored[
        f"{real_site}/page/{number}"]["title"])
    with replaying(source.name, "real") as (base, _):
        requests = RealPages.requests
        for number, path in ((legacy, "page"), (encoded, "page"), (redirected, "go")):
            done = subprocess.run([str(VENV_BIN / "harvester"), "try", source.name, f"{base}/{path}/{number}",
                                   "--json"], capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
            record = json.loads(done.stdout)["record"]
            expected = stored[f"{real_site}/page/{number}"]  # as JSON writes it (a price's Decimal128 as text)
            assert {name: record.get(name) for name in TEXT_ATTRIBUTES} == json.loads(json.dumps(
                {name: expected[name] for name in TEXT_ATTRIBUTES}, default=str)), (number, path)
        assert RealPages.requests == requests  # the recorded site answered
