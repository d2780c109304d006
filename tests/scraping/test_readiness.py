"""When a rendered page is read (harvester.scraping.browser.readiness): a ``wait_for`` holds beside the default rule,
so a
page is never read before its required attributes came. Rendered by `harvester try` in real Chromium (the one-shot
render of the slot browser, by the same rules) from a real loopback server (tests.fixtures.hostile_hosts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from harvester.cli import main

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# the title at 200 ms after load, the (optional) price at 300 ms, the required sku only at 1500 ms
LATE_SKU = """<!doctype html><html><body><h1 class="title"></h1><span class="sku"></span><script>
window.addEventListener('load', () => {
  setTimeout(() => { document.querySelector('h1.title').textContent = 'Widget 1'; }, 200);
  setTimeout(() => { const s = document.createElement('span'); s.className = 'price'; s.textContent = '11.50';
                     document.body.appendChild(s); }, 300);
  setTimeout(() => { document.querySelector('span.sku').textContent = 'SKU-00001'; }, 1500);
});</script></body></html>"""


@pytest.mark.parametrize("wait_for", [{"css": "span.price", "state": "visible"}, "network_idle"])
def test_a_wait_for_does_not_read_the_page_before_its_required_attributes(
        wait_for, site, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Under `make run` a source waiting for its XHR price (`wait_for: {css: span.price}`, as docs/sources.md
    shows) lost every record whose required sku came after the price: the page was read when the price showed
    and rejected for the sku the default rule would have waited for."""
    site.route("/late/1", text=LATE_SKU, content_type="text/html")
    document = {"name": "late_required", "render": "browser", "country": "SG",
                "input": {"seeds": [f"{site.url}/late/1"]},
                "attributes": {"title": {"css": "h1.title::text", "required": True},
                               "sku": {"css": "span.sku::text", "required": True},
                               "price": {"css": "span.price::text", "type": "float"}},
                "browser": {"wait_for": wait_for, "wait_timeout": 5}}
    path = tmp_path / "late_required.yaml"
    path.write_text(yaml.safe_dump(document))
    capsys.readouterr()
    main(["try", str(path), "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["problems"] == [], report
    assert (report["record"]["sku"], report["record"]["title"], report["record"]["price"]) == (
        "SKU-00001", "Widget 1", 11.5), report
