"""Requests with a method and a body, their identity, and ``listing.next``: what passes, what fails, and where."""

from __future__ import annotations

import pytest
from harvester.config import HttpRequest, SourceConfig, request_key
from harvester.distributor import TaskMessage

from tests.config.helpers import one_problem, source

pytestmark = pytest.mark.unit

GRAPHQL = """\
name: shop_api
content: json
input:
  requests:
    - url: https://shop.example.com/graphql
      json:
        query: "query($after: String) { products(first: 50, after: $after) { edges { node { sku } } } }"
        variables: {first: 50}
listing:
  next: {cursor: data.products.pageInfo.endCursor, into: variables.after, while: data.products.pageInfo.hasNextPage}
  records:
    item: "json:data.products.edges[].node"
    attributes:
      sku: {json: sku, required: true}
    key: [sku]
"""


def test_a_graphql_source_reads_as_a_listing_of_post_requests() -> None:
    config = source(GRAPHQL)
    seed = config.input.requests[0]
    assert config.input.kind == "listing" and seed.method == "POST" and seed.safe_to_repeat
    assert seed.request.content_type == "application/json"
    assert config.listing is not None and config.listing.next is not None
    assert config.listing.next.while_ == "data.products.pageInfo.hasNextPage"


def test_the_registered_copy_validates_back_to_the_same_source() -> None:
    config = source(GRAPHQL)
    again = SourceConfig.model_validate_json(config.model_dump_json())
    assert again == config and again.input.requests[0].key == config.input.requests[0].key


def test_two_bodies_to_one_url_are_two_requests_and_key_order_does_not_matter() -> None:
    url = "https://Shop.example.com:443/search"
    garden = HttpRequest.model_validate({"json": {"query": "garden", "page": 1}})
    kitchen = HttpRequest.model_validate({"json": {"query": "kitchen", "page": 1}})
    reordered = HttpRequest.model_validate({"json": {"page": 1, "query": "garden"}})
    assert request_key(url, garden) != request_key(url, kitchen)
    assert request_key(url, garden) == request_key(url, reordered)
    assert request_key(url, garden).startswith("https://shop.example.com/search#post-")
    assert request_key(url, None) == "https://shop.example.com/search"  # a plain GET is its canonical URL
    form = HttpRequest.model_validate({"form": {"query": "garden", "page": 1}})
    assert request_key(url, form) != request_key(url, garden)  # a form is not the same body as JSON


def test_a_task_message_carries_its_request_and_is_known_by_its_key() -> None:
    request = HttpRequest.model_validate({"json": {"query": "garden"}, "safe_to_repeat": False})
    message = TaskMessage(source="s", kind="listing", url="https://shop.example.com/search", request=request)
    again = TaskMessage.from_json(message.to_json())
    assert again.request == request and again.key == message.key == request_key(message.url, request)
    assert '"json":{"query":"garden"}' in message.to_json()


def test_connection_placeholders_stay_placeholders_in_the_key_and_the_body_as_kept() -> None:
    request = HttpRequest.model_validate({"json": {"apiKey": "${connection.password}", "query": "x"}})
    assert b"${connection.password}" in (request.body_bytes() or b"")
    assert request.body_bytes(fill=lambda text: text.replace("${connection.password}", "s3cret")) == \
        b'{"apiKey":"s3cret","query":"x"}'


def test_a_get_with_a_body_names_the_method() -> None:
    problem = one_problem(GRAPHQL.replace("    - url: https://shop.example.com/graphql\n",
                                          "    - url: https://shop.example.com/graphql\n      method: GET\n"))
    assert problem.field == "input.requests[0].method" and problem.reason.startswith("a GET sends no body")


def test_json_and_form_together_are_refused() -> None:
    problem = one_problem(GRAPHQL.replace("      json:\n", "      form: {q: x}\n      json:\n"))
    assert "give a json body or a form body, not both" in problem.reason


def test_a_request_url_must_be_http() -> None:
    problem = one_problem(GRAPHQL.replace("https://shop.example.com/graphql", "ftp://shop.example.com/graphql"))
    assert problem.field == "input.requests[0].url"


def test_the_same_request_twice_is_refused() -> None:
    twice = GRAPHQL.replace("listing:", """    - url: https://shop.example.com/graphql
      json:
        variables: {first: 50}
        query: "query($after: String) { products(first: 50, after: $after) { edges { node { sku } } } }"
listing:""")
    problem = one_problem(twice)
    assert (problem.field, problem.reason) == ("input.requests",
                                               "the same request (URL, method and body) is listed twice")


def test_a_browser_source_cannot_send_requests() -> None:
    problem = one_problem(GRAPHQL.replace("content: json\n", "content: json\nrender: browser\ncountry: SG\n"))
    assert problem.field == "input.requests"
    assert problem.reason.startswith("requests with a method and a body are sent by the HTTP workers")


def test_next_needs_exactly_one_kind() -> None:
    both = one_problem(GRAPHQL.replace("next: {cursor:", "next: {page: page, cursor:"))
    assert (both.field, both.reason) == ("listing.next", "give exactly one of cursor, page or offset")
    none = one_problem(GRAPHQL.replace("cursor: data.products.pageInfo.endCursor, ", ""))
    assert (none.field, none.reason) == ("listing.next", "give exactly one of cursor, page or offset")


def test_next_expressions_compile() -> None:
    problem = one_problem(GRAPHQL.replace("while: data.products.pageInfo.hasNextPage", "while: 'page <'"))
    assert problem.field == "listing.next.while" and problem.reason.startswith("not a valid JMESPath expression")


def test_next_into_is_a_dotted_name() -> None:
    problem = one_problem(GRAPHQL.replace("into: variables.after", "into: 'variables..after'"))
    assert problem.field == "listing.next.into"


def test_next_reads_json_responses_only() -> None:
    html = """\
name: shop
input:
  seeds: ["https://shop.example.com/shop"]
listing:
  link_selectors: ["a::attr(href)"]
  next: {page: page, into: page}
attributes:
  title: "h1::text"
"""
    problem = one_problem(html)
    assert (problem.field, problem.reason) == ("listing.next",
                                               "the next request is read from a JSON response (content: json)")


def test_the_docs_examples_of_sources_behind_post_are_valid() -> None:
    import re

    from harvester.settings import REPOSITORY_ROOT

    docs = (REPOSITORY_ROOT / "docs" / "sources.md").read_text()
    section = docs.split("## Sources behind POST", 1)[1].split("\n## ", 1)[0]
    examples = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert len(examples) == 2
    graphql, search = (source(example.replace("${HARVESTER_DEMO_SITE_URL}", "https://shop.example.com"))
                       for example in examples)
    assert graphql.listing is not None and graphql.listing.next is not None and graphql.listing.next.cursor
    assert search.listing is not None and search.listing.next is not None and search.listing.next.page == "page"
    assert len({seed.key for seed in search.input.requests}) == 2


def test_a_secret_in_a_body_is_refused_unless_the_connection_fills_it_in() -> None:
    variables = "        variables: {first: 50}"
    literal = GRAPHQL.replace(variables, f"{variables}\n        api_key: abc123")
    problem = one_problem(literal)
    assert problem.field == "input.requests[0].json.api_key" and "http_connection_id" in problem.reason
    filled = source(GRAPHQL.replace("        variables: {first: 50}",
                                    "        variables: {first: 50}\n        api_key: ${connection.password}"))
    assert filled.input.requests[0].json_body["api_key"] == "${connection.password}"


def test_a_request_cannot_carry_an_authorization_or_cookie_header() -> None:
    for header in ("Authorization", "Cookie"):
        problem = one_problem(GRAPHQL.replace("      json:\n", f"      headers: {{{header}: x}}\n      json:\n"))
        assert problem.field == f"input.requests[0].headers.{header}"
