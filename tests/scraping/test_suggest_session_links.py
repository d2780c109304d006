"""`harvester suggest --listing` on a listing whose links carry session ids: the follow pattern it writes is
matched against canonical URLs, which no longer hold the session ids, so `try` follows every item."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from harvester.cli import main

pytestmark = pytest.mark.integration


def test_the_suggested_follow_pattern_matches_links_with_session_ids(demo_site, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    listing = f"{demo_site.url}/legacy/shop?page=1"
    path = tmp_path / "sessions.yaml"
    assert main(["suggest", listing, "--listing", "--name", "sessions", "-o", str(path)]) == 0
    follow = yaml.safe_load(path.read_text())["listing"]["follow"]
    assert "jsessionid" not in follow.lower() and "phpsessid" not in follow.lower(), follow
    capsys.readouterr()
    main(["try", str(path), listing, "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sorted(report["follow_details"]) == sorted(f"{demo_site.url}/legacy/item/{n}" for n in range(1, 7))
