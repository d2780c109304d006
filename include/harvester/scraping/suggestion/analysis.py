"""A suggestion for one URL: fetch it (HTTP, or the one-shot browser render of `harvester try`),
read what it offers, then keep only the attributes that give a value on that very page."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from harvester.scraping.extraction import PageData, search
from harvester.scraping.suggestion.api_paging import next_request_rule, unwrap_edges
from harvester.scraping.suggestion.choices import Suggestion, pick_key
from harvester.scraping.suggestion.data import (
    best_object,
    data_choices,
    data_fields,
    next_key,
    object_lists,
    structured_choices,
)
from harvester.scraping.suggestion.listing import suggest_listing
from harvester.scraping.suggestion.markup import css_choices
from harvester.scraping.suggestion.targeted import detect_schema, first_sound, schema_named
from harvester.scraping.suggestion.writer import render_yaml


def suggest_detail(page: PageData, suggestion: Suggestion) -> None:
    """In a target schema's terms when one is asked for (or, with ``auto``, declared or looked like by the
    page); else structured data first, and CSS where it gives fewer than two attributes (or none at all)."""
    schema = detect_schema(page) if suggestion.schema == "auto" else (
        schema_named(suggestion.schema) if suggestion.schema else None)
    if schema is not None:
        chosen, notes = first_sound([page, *suggestion.sample_pages], schema)
        suggestion.notes.append(f"schema: {schema.name}" + (" (the page declares or looks like it)"
                                                            if suggestion.schema == "auto" else ""))
        suggestion.notes += notes
        suggestion.add(chosen)
        if suggestion.include_all:
            suggestion.add(structured_choices(page)[0])
            suggestion.add(css_choices(page.selector))
        key, why = pick_key(suggestion.attributes)
        suggestion.key, suggestion.key_why = (key, why) if key else (["url"], "no identifier found: the page's url")
        return
    choices, notes = structured_choices(page)
    suggestion.notes += notes
    suggestion.add(choices)
    css = css_choices(page.selector)
    if len(suggestion.attributes) < 2 or not choices:
        suggestion.add(css)
    key, why = pick_key(suggestion.attributes)
    suggestion.key, suggestion.key_why = (key, why) if key else (["url"], "no identifier found: the page's url")


def suggest_json(page: PageData, suggestion: Suggestion) -> None:
    """A JSON response: records of its largest list of objects, else the attributes of its main object."""
    suggestion.content = "json"
    data = page.json
    lists = object_lists(data)
    if lists:
        path, items = unwrap_edges(*lists[0])
        suggestion.kind = "listing"
        suggestion.records_item = {"json": path}
        suggestion.records_why = f"{path}: the response's largest list of objects ({len(items)} items)"
        suggestion.add(data_choices(data_fields(items[0]), lambda inner: {"json": inner}, "each item's"),
                       suggestion.records)
        values = {choice.name: [search(choice.spec["json"], item) for item in items] for choice in suggestion.records}
        suggestion.key, suggestion.key_why = pick_key(suggestion.records, values)
        if suggestion.request_body is not None:  # an API behind POST pages by its response, not by a link
            suggestion.next_rule, why = next_request_rule(data, suggestion.request_body, len(items))
            suggestion.listing = {"max_depth": 20} if suggestion.next_rule else {}
            suggestion.listing_why += [why, "max_depth: 20 pages"] if suggestion.next_rule else [why]
            return
        following = next_key(data)
        suggestion.listing = {"next_page_selectors": [f"json:{following}"], "max_depth": 5} if following else {}
        if following:  # max_depth as an HTML listing's: the default (2) would read three pages and stop, unsaid
            suggestion.listing_why += [f"next_page_selectors: json:{following}, the response's next page",
                                       "max_depth: 5 pages deep (raise it to read more of the pagination)"]
        return
    found = best_object(data) or ("", data if isinstance(data, dict) else {})
    path, obj = found
    prefix = f"{path}." if path else ""
    suggestion.add(data_choices(data_fields(obj), lambda inner: {"json": prefix + inner}, "the response's"))
    key, why = pick_key(suggestion.attributes)
    suggestion.key, suggestion.key_why = (key, why) if key else (["url"], "no identifier found: the page's url")


def prune(suggestion: Suggestion, pages: dict[str, PageData]) -> None:
    """Drop the attributes that give no value on the page they were suggested from."""
    from harvester.config import parse_source
    from harvester.scraping.extraction import extract_listing_records, extract_record

    source = parse_source(render_yaml(suggestion, "harvester suggest"), "<suggested>")
    if suggestion.records and "listing" in pages:
        listing = extract_listing_records(source, pages["listing"], suggestion.url)
        bad = {problem.attribute: str(problem) for extraction in listing.extractions[:3]
               for problem in extraction.problems}
        suggestion.dropped += [bad[choice.name] for choice in suggestion.records if choice.name in bad]
        suggestion.records = [choice for choice in suggestion.records if choice.name not in bad]
    if suggestion.attributes and "details" in pages:
        extraction = extract_record(source, pages["details"], pages["details"].url)
        bad = {problem.attribute: str(problem) for problem in extraction.problems}
        suggestion.dropped += [bad[choice.name] for choice in suggestion.attributes if choice.name in bad]
        suggestion.attributes = [choice for choice in suggestion.attributes if choice.name not in bad]
    if suggestion.key != ["url"] and not set(suggestion.key) <= {choice.name for choice in
                                                                 suggestion.attributes + suggestion.records}:
        suggestion.key, suggestion.key_why = ["url"], "the identifier gave no value: the page's url"


async def fetch_page(url: str, name: str, render: str, country: str | None, content: str = "html",
                     body: Any = None) -> Any:
    """The page as `harvester try` fetches it (:func:`harvester.scraping.commands.fetch_for_try`); with ``body``
    a POST of that JSON."""
    from harvester.config import HttpRequest, SourceConfig
    from harvester.scraping.commands import fetch_for_try
    from harvester.settings import get_settings

    probe = SourceConfig.model_validate({"name": name, "render": render, "country": country, "content": content,
                                         "input": {"seeds": [url]},
                                         "attributes": {"probe": "json:@" if content == "json" else "title"}})
    request = None if body is None else HttpRequest.model_validate({"method": "POST", "json": body})
    return await fetch_for_try(probe, url, get_settings(), request=request)


def _is_json(fetch: Any) -> bool:
    media = (fetch.content_type or "").split(";", 1)[0].strip().lower()
    return media.endswith(("/json", "+json")) or (not media and fetch.text.lstrip()[:1] in ("{", "["))


def suggest(url: str, name: str, listing: bool = False, render: str | None = None, country: str = "SG",
            schema: str | None = None, include_all: bool = False, samples: list[str] | None = None,
            html: Path | None = None, body: Any = None) -> Suggestion:
    """Fetch the page (HTTP; Chromium when asked, or when the HTTP body lacks what the rendered page has), or read
    it from ``html``; with ``samples``, keep only what holds on those pages of the site too. With ``body``, the
    URL is a JSON endpoint POSTed that sample body: records and the rule of its next request."""
    suggestion = Suggestion(url, name, schema=schema, include_all=include_all, request_body=body)
    mode = render or "http"
    if body is not None and mode == "browser":
        raise SuggestError("a POST endpoint is read over HTTP: --post-json cannot go with --render browser")
    fetch = _first_fetch(url, name, mode, country, html, body)
    suggestion.render = mode
    if mode == "browser":
        suggestion.render_why, suggestion.country = "asked for with --render browser", country
    suggestion.sample_pages = [_sample_page(sample, name, mode, country) for sample in samples or []]
    pages = analyse(fetch, suggestion, listing)
    if render is None and html is None and not _is_json(fetch) and not listing \
            and len(suggestion.attributes) + len(suggestion.records) < 2:
        suggestion, pages = _rendered_if_richer(suggestion, pages, country, listing)
    if listing and suggestion.kind == "listing" and not suggestion.records and (detail := pages.pop("first_detail",
                                                                                                    None)):
        detail_fetch = asyncio.run(fetch_page(detail, name, suggestion.render, suggestion.country))
        if detail_fetch.ok:
            pages["details"] = page_of(detail_fetch, detail, suggestion.content)
            suggestion.sample_pages = [_sample_page(sample, name, suggestion.render, suggestion.country)
                                       for sample in suggestion.detail_samples]
            suggestion.notes.append(f"attributes: from the first detail page, {detail}" + (
                f", and held on {len(suggestion.sample_pages)} more of the listing's" if suggestion.sample_pages
                else ""))
            suggest_detail(pages["details"], suggestion)
    _found_something(suggestion, "")
    prune(suggestion, pages)
    prune_on_samples(suggestion)
    _found_something(suggestion, "; what was found gave no value there: " + "; ".join(suggestion.dropped))
    return suggestion


def _first_fetch(url: str, name: str, mode: str, country: str, html: Path | None, body: Any = None) -> Any:
    if html is not None:
        from harvester.scraping.commands import saved_page
        from harvester.settings import get_settings

        if not html.is_file():
            raise SuggestError(f"no such file: {html}")
        return saved_page(html, url, get_settings().body_size_cap_bytes)  # capped as a fetched page is
    if body is not None:
        fetch = asyncio.run(fetch_page(url, name, "http", None, "json", body))
    else:
        fetch = asyncio.run(fetch_page(url, name, mode, country if mode == "browser" else None))
    if fetch.outcome == "parse_error" and "content type" in fetch.reason and "json" in fetch.reason:
        fetch = asyncio.run(fetch_page(url, name, "http", None, "json"))  # an API: read its JSON
    if not fetch.ok:
        raise SuggestError(f"{url}: {fetch.counter}: {fetch.reason or 'no page'}")
    return fetch


def _sample_page(url: str, name: str, mode: str, country: str | None) -> PageData:
    """Another page of the site the suggestion must hold on: one that cannot be read is the user's error."""
    fetch = asyncio.run(fetch_page(url, name, mode, country if mode == "browser" else None))
    if not fetch.ok:
        raise SuggestError(f"sample {url}: {fetch.counter}: {fetch.reason or 'no page'}")
    return page_of(fetch, url, "html")


def _rendered_if_richer(suggestion: Suggestion, pages: dict[str, Any], country: str, listing: bool
                        ) -> tuple[Suggestion, dict[str, Any]]:
    """The suggestion from the rendered page when it finds more fields than the HTTP body's."""
    browser = Suggestion(suggestion.url, suggestion.name, render="browser", country=country, schema=suggestion.schema,
                         include_all=suggestion.include_all)
    browser.sample_pages = suggestion.sample_pages
    try:
        rendered = asyncio.run(fetch_page(suggestion.url, suggestion.name, "browser", country))
    except Exception as error:  # no Chromium here: the HTTP suggestion stands, with the reason
        suggestion.notes.append(f"the HTTP body had few fields and rendering failed: {error}")
        return suggestion, pages
    if rendered.ok:
        rendered_pages = analyse(rendered, browser, listing)
        if len(browser.attributes) > len(suggestion.attributes):
            browser.render_why = (f"the HTTP body has {len(suggestion.attributes)} of the fields the rendered "
                                  f"page has ({len(browser.attributes)}): the page is built by JavaScript")
            return browser, rendered_pages
    return suggestion, pages


def prune_on_samples(suggestion: Suggestion) -> None:
    """Drop the attributes that give no value on one of the sampled pages; say on how many each held."""
    from harvester.config import parse_source
    from harvester.scraping.extraction import extract_record

    if not suggestion.sample_pages or not suggestion.attributes:
        return
    source = parse_source(render_yaml(suggestion, "harvester suggest"), "<suggested>")
    missing: dict[str, str] = {}
    for page in suggestion.sample_pages:
        extraction = extract_record(source, page, page.url)
        for choice in suggestion.attributes:
            if not extraction.has_value(choice.name) and choice.name not in missing:
                missing[choice.name] = f"{choice.name}: no value on the sampled page {page.url}"
    suggestion.dropped += [missing[choice.name] for choice in suggestion.attributes if choice.name in missing]
    suggestion.attributes = [choice for choice in suggestion.attributes if choice.name not in missing]
    for choice in suggestion.attributes:
        if "sampled pages" not in choice.why:
            choice.why += f"; held on all {len(suggestion.sample_pages) + 1} pages"
    if suggestion.key != ["url"] and not set(suggestion.key) <= {choice.name for choice in suggestion.attributes}:
        suggestion.key, suggestion.key_why = ["url"], "the identifier gave no value on every page: the page's url"


def _found_something(suggestion: Suggestion, detail: str) -> None:
    """A page with no field to suggest is the user's answer, not a traceback (a source needs an attribute)."""
    if not (suggestion.attributes or suggestion.records):
        raise SuggestError(f"{suggestion.url}: no field found on the {suggestion.render} page (no JSON-LD, microdata, "
                           f"script data, OpenGraph or classed elements){detail}. Content a script writes after load "
                           "is not seen here: write the attributes by hand, mark them required and check the page "
                           "with `harvester try` (it waits for them)")


def page_of(fetch: Any, url: str, content: str) -> PageData:
    """The page as the selectors read it, refused as the workers refuse it before lxml parses it
    (:func:`harvester.scraping.extraction.markup.markup_refusal`): a suggestion for a page no run could read
    helps nobody, and the parse alone may take minutes."""
    from harvester.scraping.extraction import DataBounds, markup_refusal
    from harvester.settings import get_settings

    settings = get_settings()
    if content == "html" and (refusal := markup_refusal(fetch.text, settings.max_attributes_per_element,
                                                        settings.max_elements_per_page)) is not None:
        raise SuggestError(f"{fetch.final_url or url}: {refusal}")
    return PageData(fetch.text, fetch.final_url or url, content, DataBounds.from_settings(settings))


def analyse(fetch: Any, suggestion: Suggestion, listing: bool) -> dict[str, Any]:
    """Fill ``suggestion`` from one fetched page; the pages to check it against."""
    if _is_json(fetch):
        page = page_of(fetch, suggestion.url, "json")
        suggest_json(page, suggestion)
        return {"listing" if suggestion.records else "details": page}
    page = page_of(fetch, suggestion.url, "html")
    if listing:
        first = suggest_listing(page, suggestion)
        return {"listing": page, **({"first_detail": first} if first else {})}
    suggest_detail(page, suggestion)
    return {"details": page}


class SuggestError(Exception):
    """The page could not be fetched or read."""
