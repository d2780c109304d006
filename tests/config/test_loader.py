"""Loading source files: the error format, YAML problems, credentials, duplicates, placeholders."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from harvester.config.loader import (
    CONNECTIONS_HINT,
    SourceConfigError,
    get_source,
    load_source_file,
    load_sources,
)
from harvester.settings import REPOSITORY_ROOT, get_settings

from tests.config.helpers import MINIMAL, one_problem, problems, source, with_lines

pytestmark = pytest.mark.unit

ERROR_LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): (?P<field>[^:]+): (?P<reason>.+)$")


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


# -- the error format ---------------------------------------------------------------------------------
def test_an_error_reads_file_line_field_reason(tmp_path: Path) -> None:
    path = write(tmp_path, "shop.yaml", with_lines("rate_limit:", "  per_minute: 0"))
    with pytest.raises(SourceConfigError) as caught:
        load_source_file(path)
    error = caught.value
    assert str(error) == f"{path}:7: rate_limit.per_minute: Input should be greater than or equal to 1"
    assert (error.file, error.line, error.field) == (str(path), 7, "rate_limit.per_minute")
    assert ERROR_LINE.match(str(error))


def test_several_problems_give_one_line_each(tmp_path: Path) -> None:
    path = write(tmp_path, "shop.yaml", with_lines("retries: -1", "priority: urgent"))
    with pytest.raises(SourceConfigError) as caught:
        load_source_file(path)
    lines = str(caught.value).splitlines()
    assert len(lines) == 2 and all(ERROR_LINE.match(line) for line in lines)
    assert [ERROR_LINE.match(line)["line"] for line in lines] == ["6", "7"]


def test_a_missing_nested_field_points_at_its_parent(tmp_path: Path) -> None:
    problem = one_problem(MINIMAL + "listing:\n  max_depth: 2\n")
    assert (problem.field, problem.line) == ("listing.link_selectors", 6)
    # a listing needs links to follow or records of its own: either may be the missing one
    assert problem.reason == "give link_selectors (detail pages to visit), records, or both"


# -- YAML problems ------------------------------------------------------------------------------------
def test_yaml_that_does_not_parse_names_its_line() -> None:
    problem = one_problem("name: shop\ninput:\n  seeds: [https://a.example/1\nattributes: {}\n")
    assert problem.field == "(source)" and problem.reason.startswith("not valid YAML")
    assert problem.line in (3, 4)


def test_a_duplicate_key_is_an_error_naming_both_lines() -> None:
    problem = one_problem(with_lines("retries: 2", "retries: 5"))
    assert (problem.field, problem.line) == ("retries", 7)
    assert "duplicate key (first on line 6)" in problem.reason


def test_an_empty_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SourceConfigError, match="the file is empty"):
        load_source_file(write(tmp_path, "empty.yaml", "# nothing yet\n"))


def test_a_list_instead_of_a_mapping_is_an_error() -> None:
    assert "must be a YAML mapping" in one_problem("- name: shop\n").reason


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SourceConfigError, match="cannot read the file"):
        load_source_file(tmp_path / "absent.yaml")


def test_anchors_and_merge_keys_work() -> None:
    config = source(MINIMAL + '  a: &price {css: ".p::text", type: float}\n  b:\n    <<: *price\n    required: true\n')
    assert config.attributes["b"].type == "float" and config.attributes["b"].required


# -- credentials --------------------------------------------------------------------------------------
@pytest.mark.parametrize("lines", [
    ("output:", "  password: hunter2"),
    ("input:", "  seeds: [https://a.example/1]", "  mongo: {collection: c, api_key: abc}"),
    ("headers: {X-Auth-Token: abc}",),
    ("headers: {Authorization: Bearer abc}",),
    ("headers: {Cookie: session=1}",),
    ("secret: x",),
])
def test_credential_keys_are_rejected_pointing_to_airflow_connections(lines: tuple[str, ...]) -> None:
    text = MINIMAL.replace('input:\n  seeds: ["https://shop.example.com/product/1"]\n', "") if lines[0] == "input:" \
        else MINIMAL
    found = problems(text + "\n".join(lines) + "\n")
    assert any(CONNECTIONS_HINT in problem.reason for problem in found), [str(problem) for problem in found]


@pytest.mark.parametrize("lines, field", [
    (("headers: {X-Api-Key: abc}",), "http_connection_id"),
    (("password: hunter2",), "http_connection_id"),
    (("output:", "  password: hunter2"), "output.connection_id"),
])
def test_the_credentials_hint_names_the_field_that_takes_the_connection(lines: tuple[str, ...], field: str) -> None:
    """Under `make run` a header `X-Api-Key` was refused with "name it with connection_id": a site's connection
    is named by `http_connection_id` (a top-level `connection_id` is an unknown key)."""
    found = problems(MINIMAL + "\n".join(lines) + "\n")
    reasons = [problem.reason for problem in found if CONNECTIONS_HINT in problem.reason]
    assert reasons and all(reason.endswith(f"name it with {field}") for reason in reasons), reasons


def test_a_uri_with_a_password_is_rejected() -> None:
    problem = one_problem(with_lines("description: copy of mongodb://harvester:s3cret@db.example:27017/x"))
    assert problem.field == "description" and "carries a password" in problem.reason
    assert "Airflow connection" in problem.reason


def test_seed_urls_with_a_password_are_rejected() -> None:
    text = MINIMAL.replace("https://shop.example.com/product/1", "https://user:pw@shop.example.com/product/1")
    assert "carries a password" in one_problem(text).reason


def test_data_field_names_that_look_like_secrets_are_fine() -> None:
    config = source(MINIMAL + '  token_count: {css: ".tokens::text", type: int}\n')
    assert "token_count" in config.attributes


# -- placeholders -------------------------------------------------------------------------------------
def test_the_demo_site_placeholder_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARVESTER_DEMO_SITE_URL", "http://127.0.0.1:9999")
    config = source(MINIMAL.replace("https://shop.example.com", "${HARVESTER_DEMO_SITE_URL}"))
    assert config.input.seeds == ["http://127.0.0.1:9999/product/1"]


def test_a_placeholder_falls_back_to_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARVESTER_DEMO_SITE_URL", raising=False)
    get_settings.cache_clear()
    config = source(MINIMAL.replace("https://shop.example.com", "${HARVESTER_DEMO_SITE_URL}"))
    assert config.input.seeds == [f"{get_settings().demo_site_url}/product/1"]


def test_an_unknown_placeholder_is_an_error() -> None:
    problem = one_problem(MINIMAL.replace("https://shop.example.com", "${HARVESTER_NO_SUCH_THING}"))
    assert problem.field == "input.seeds[0]" and "HARVESTER_NO_SUCH_THING" in problem.reason


# -- directories --------------------------------------------------------------------------------------
def test_a_bad_file_does_not_stop_the_others(tmp_path: Path) -> None:
    write(tmp_path, "a_good.yaml", MINIMAL.replace("shop", "good"))
    write(tmp_path, "b_bad.yaml", MINIMAL.replace("shop", "bad") + "retries: -1\n")
    write(tmp_path, "c_good.yaml", MINIMAL.replace("shop", "other"))
    write(tmp_path, "notes.txt", "not a source")
    result = load_sources(tmp_path)
    assert sorted(result.sources) == ["good", "other"]
    assert [error.file for error in result.errors] == [str(tmp_path / "b_bad.yaml")]
    assert result.files["good"] == tmp_path / "a_good.yaml"


def test_a_duplicate_name_is_an_error_naming_both_files(tmp_path: Path) -> None:
    first = write(tmp_path, "shop.yaml", MINIMAL)
    second = write(tmp_path, "shop_copy.yaml", "# a copy\n" + MINIMAL)
    result = load_sources(tmp_path)
    assert list(result.sources) == ["shop"] and result.files["shop"] == first
    (error,) = result.errors
    assert (error.file, error.line, error.field) == (str(second), 2, "name")
    assert str(first) in error.reason and "duplicate source name 'shop'" in error.reason


def test_get_source_by_name(tmp_path: Path) -> None:
    write(tmp_path, "shop.yaml", MINIMAL)
    assert get_source("shop", tmp_path).name == "shop"
    with pytest.raises(KeyError):
        get_source("absent", tmp_path)


def test_get_source_of_a_broken_file_raises_its_error(tmp_path: Path) -> None:
    write(tmp_path, "shop.yaml", with_lines("retries: -1"))
    with pytest.raises(SourceConfigError, match="retries"):
        get_source("shop", tmp_path)


def test_an_edited_file_is_seen_on_the_next_load(tmp_path: Path) -> None:
    path = write(tmp_path, "shop.yaml", MINIMAL)
    assert load_sources(tmp_path).sources["shop"].retries == 3
    path.write_text(with_lines("retries: 7"))
    assert load_sources(tmp_path).sources["shop"].retries == 7


def test_the_default_directory_is_the_settings_sources_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    write(tmp_path, "shop.yaml", MINIMAL)
    monkeypatch.setenv("HARVESTER_SOURCES_DIR", str(tmp_path))
    get_settings.cache_clear()
    try:
        assert list(load_sources().sources) == ["shop"]
    finally:
        monkeypatch.delenv("HARVESTER_SOURCES_DIR")
        get_settings.cache_clear()


def test_the_committed_example_sources_are_valid() -> None:
    result = load_sources(REPOSITORY_ROOT / "include" / "sources")
    assert not result.errors, [str(error) for error in result.errors]
    assert {"demo_shop", "demo_shop_browser", "demo_shop_from_mongo"} <= set(result.sources)
    shop, browser, mongo = (result.sources[name] for name in ("demo_shop", "demo_shop_browser", "demo_shop_from_mongo"))
    assert shop.render == "http" and shop.input.kind == "listing" and shop.listing is not None
    assert browser.render == "browser" and browser.country == "SG" and browser.queue == "pageslots"
    assert mongo.input.mongo is not None and not mongo.input.seeds


def test_paths_inside_the_working_directory_are_shown_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sources").mkdir()
    path = write(tmp_path / "sources", "shop.yaml", with_lines("retries: -1"))
    with pytest.raises(SourceConfigError) as caught:
        load_source_file(path)
    assert caught.value.file == "sources/shop.yaml"
    assert str(caught.value).startswith("sources/shop.yaml:6: retries: ")


def test_get_source_reads_name_yaml_alone_and_else_scans(tmp_path: Path) -> None:
    write(tmp_path, "shop.yaml", MINIMAL)
    write(tmp_path, "broken.yaml", "name: [\n")
    write(tmp_path, "misnamed.yaml", MINIMAL.replace("shop", "elsewhere"))
    assert get_source("shop", tmp_path).name == "shop"
    assert get_source("elsewhere", tmp_path).name == "elsewhere"


def test_mongo_filter_fields_that_look_like_secrets_are_fine_but_passwords_in_values_are_not() -> None:
    text = MINIMAL.replace('  seeds: ["https://shop.example.com/product/1"]',
                           '  mongo: {collection: c, filter: {$and: [{token_count: 1}, {secret: false}]}}')
    assert source(text).input.mongo is not None
    assert "carries a password" in one_problem(text.replace("{secret: false}", "{uri: 'redis://:pw@h:1/0'}")).reason
