"""Session ids leave the canonical URL (a page's key, what ``follow`` matches): one item linked from two
renders of a listing with two sessions is one key. A source may drop more names or keep some."""

from __future__ import annotations

import pytest
from harvester.config import SourceConfig
from harvester.urls import SessionIds, canonicalise_url
from pydantic import ValidationError

pytestmark = pytest.mark.unit
TOKEN = "9F1C2E77A04B4D3E9F1C2E77A04B4D3E"


@pytest.mark.parametrize(("url", "canonical"), [
    (f"http://shop.example/item/7;jsessionid={TOKEN}", "http://shop.example/item/7"),
    (f"http://shop.example/item/7;JSESSIONID={TOKEN}.node1?color=red", "http://shop.example/item/7?color=red"),
    (f"http://shop.example/item/7?PHPSESSID={TOKEN}", "http://shop.example/item/7"),
    (f"http://shop.example/item/7?sid={TOKEN.lower()}&page=2", "http://shop.example/item/7?page=2"),
    (f"http://shop.example/item/7?sessionid={TOKEN}", "http://shop.example/item/7"),
    ("http://shop.example/item/7?ASPSESSIONIDQASCTRSQ=KLMNOPQRSTUV", "http://shop.example/item/7"),
    ("http://shop.example/item/7?phpsessid=short", "http://shop.example/item/7"),
])
def test_session_ids_leave_the_canonical_url(url: str, canonical: str) -> None:
    assert canonicalise_url(url) == canonical


@pytest.mark.parametrize("url", [
    "http://shop.example/item/7?sid=de",  # a language, not a session
    "http://shop.example/item/7?sessionid=12",  # too short to be a token
    "http://shop.example/docs;type=a/7",  # a path parameter that is no session
])
def test_parameters_that_only_look_like_sessions_stay(url: str) -> None:
    assert canonicalise_url(url) == url


def test_one_item_from_two_sessions_is_one_key() -> None:
    first = canonicalise_url(f"/item/7;jsessionid={TOKEN}?PHPSESSID=A{TOKEN}", "http://shop.example/list")
    second = canonicalise_url(f"/item/7;jsessionid=B{TOKEN}?PHPSESSID=C{TOKEN}", "http://shop.example/list?page=2")
    assert first == second == "http://shop.example/item/7"


def test_a_source_drops_more_names_and_keeps_others() -> None:
    rules = SessionIds(drop=frozenset({"visit"}), keep=frozenset({"phpsessid"}))
    assert canonicalise_url("http://shop.example/item/7?visit=3", session_ids=rules) == "http://shop.example/item/7"
    assert canonicalise_url(f"http://shop.example/item/7?PHPSESSID={TOKEN}", session_ids=rules) == (
        f"http://shop.example/item/7?PHPSESSID={TOKEN}")


def source(**session_ids: object) -> SourceConfig:
    return SourceConfig.model_validate({"name": "shop", "input": {"seeds": ["http://shop.example/"]},
                                        "attributes": {"title": "h1::text"}, "session_ids": session_ids})


def test_the_source_field_gives_its_rules_with_names_lower_cased() -> None:
    rules = source(drop=["Visit"], keep=["SID"]).session_ids.rules
    assert rules == SessionIds(drop=frozenset({"visit"}), keep=frozenset({"sid"}))


@pytest.mark.parametrize(("session_ids", "message"), [
    ({"drop": ["a b"]}, "session_ids.drop"), ({"keep": ["=x"]}, "session_ids.keep"),
    ({"drop": ["sid"], "keep": ["SID"]}, "both dropped and kept"),
])
def test_bad_session_id_names_are_refused_naming_the_field(session_ids: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        source(**session_ids)
