"""The rule of an API's next request as `harvester suggest --post-json` reads it from one response and its body."""

from __future__ import annotations

import pytest
from harvester.config import NextRequest
from harvester.scraping.suggestion.api_paging import next_request_rule, unwrap_edges

pytestmark = pytest.mark.unit


def test_a_graphql_connection_pages_by_its_cursor_into_the_variable_the_body_names() -> None:
    data = {"data": {"search": {"edges": [], "pageInfo": {"endCursor": "c2", "hasNextPage": True}}}}
    rule, why = next_request_rule(data, {"query": "q", "variables": {"cursor": None, "first": 20}}, 20)
    assert rule == {"cursor": "data.search.pageInfo.endCursor", "into": "variables.cursor",
                    "while": "data.search.pageInfo.hasNextPage"}
    assert "GraphQL connection" in why
    assert next_request_rule(data, {"query": "q"}, 20)[0]["into"] == "variables.after"  # GraphQL's usual name
    NextRequest.model_validate(rule)  # what it suggests validates


def test_a_search_answer_pages_by_number_while_below_its_page_count() -> None:
    rule, _ = next_request_rule({"hits": [], "page": 1, "totalPages": 7}, {"query": "x", "page": 1}, 20)
    assert rule == {"page": "page", "into": "page", "while": "page < totalPages"}


def test_an_offset_in_the_body_steps_by_the_page_size() -> None:
    assert next_request_rule({"items": []}, {"offset": 0, "limit": 25}, 25)[0] == {"offset": 25, "into": "offset"}
    assert next_request_rule({"items": []}, {"from": 0}, 10)[0] == {"offset": 10, "into": "from"}


def test_no_known_shape_gives_no_rule_and_says_so() -> None:
    rule, why = next_request_rule({"items": [{"a": 1}]}, {"query": "x"}, 1)
    assert rule is None and "write listing.next by hand" in why


def test_edges_are_unwrapped_to_their_nodes() -> None:
    edges = [{"cursor": "1", "node": {"sku": "a"}}, {"cursor": "2", "node": {"sku": "b"}}]
    assert unwrap_edges("data.products.edges", edges) == ("data.products.edges[].node", [{"sku": "a"}, {"sku": "b"}])
    plain = [{"sku": "a"}, {"sku": "b"}]
    assert unwrap_edges("hits", plain) == ("hits", plain)
