"""Read source YAML files into :class:`SourceConfig`, with errors that point at a file, a line and a field.

Every problem reads ``file:line: field: reason``. The YAML is composed with libyaml (when built in)
and turned into Python by walking its nodes, which keeps each value's line number, catches
duplicate keys (PyYAML would silently keep the last one) and is fast enough to load 500 files
during one DAG parse. A directory's valid files are cached on disk keyed by their bytes
(harvester.config.cache): an edited file is seen on the next load, an unchanged one is not read again.

Hand-written YAML is hostile input too: an alias that refers to itself, or a few hundred bytes of
nested aliases that expand to millions of values, are refused before anything is built
(:data:`MAX_EXPANDED_VALUES`), and anything else that goes wrong while reading one file becomes
that file's problem, so the other sources still load.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from harvester.config.cache import SourceCache, content_key
from harvester.config.model import SourceConfig
from harvester.config.upstreams import check_upstreams
from harvester.errors import SourceConfigError

SOURCE_SUFFIXES = (".yaml", ".yml")
ROOT_FIELD = "(source)"
CONNECTIONS_HINT = (
    "credentials never go in source YAML: store them in an Airflow connection "
    "(Admin > Connections, or `airflow connections add`)"
)


def connections_hint(location: tuple[str | int, ...]) -> str:
    """The hint with the field that names the connection: MongoDB's (input.mongo, output) its ``connection_id``,
    a site's (headers, URLs, a login) the source's ``http_connection_id`` (docs/sources.md)."""
    for section in (("input", "mongo"), ("output",)):
        if location[:len(section)] == section:
            return f"{CONNECTIONS_HINT} and name it with {'.'.join(section)}.connection_id"
    return (f"{CONNECTIONS_HINT} of type http (its login and password, or extras headers and cookies) and name it "
            "with http_connection_id")

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLACEHOLDER = re.compile(r"\$\{(HARVESTER_[A-Z0-9_]+)\}")
# Settings a placeholder may never name: they carry credentials, which never go into requests or YAML.
PLACEHOLDER_REFUSED = frozenset({"mongo_uri", "redis_url"})
# Fields whose value is a regular expression: a placeholder's value is pasted in escaped (matched literally).
REGEX_FIELDS: frozenset[tuple[str, ...]] = frozenset({("listing", "follow")})
# Values of one file once its aliases are expanded; real sources hold a few hundred.
MAX_EXPANDED_VALUES = 20_000
_SECRET_KEY = re.compile(
    r"(^|[_-])(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credentials?)($|[_-])",
    re.IGNORECASE,
)
_SECRET_HEADERS = {"authorization", "proxy-authorization", "cookie"}
_URI_WITH_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@", re.IGNORECASE)
# Keys that name data (record fields; anything in a Mongo query), not settings: never taken for credentials.
_MONGO_FILTER = ("input", "mongo", "filter")

Location = tuple[str | int, ...]
# A request body's value the fetcher fills in from the source's http_connection_id when it sends the request
_CONNECTION_VALUE = re.compile(r"\$\{connection\.(login|password|headers\.[A-Za-z0-9_-]+)\}")


def _in_request(location: Location, parts: tuple[str, ...]) -> bool:
    """Whether ``location`` is within ``input.requests[n]`` under one of ``parts`` (its body, its headers)."""
    return len(location) >= 4 and location[:2] == ("input", "requests") and location[3] in parts


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a source file."""

    file: str
    line: int
    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.reason}"


@dataclass
class SourceSet:
    """Every valid source of a directory, and an error for each file that is not."""

    sources: dict[str, SourceConfig] = field(default_factory=dict)
    errors: list[SourceConfigError] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)


def default_directory() -> Path:
    from harvester.settings import get_settings

    return get_settings().sources_dir


def source_files(paths: Iterable[str | Path]) -> list[Path]:
    """The source files named by ``paths`` (files, or directories searched non-recursively), sorted."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found.extend(
                sorted(child for child in path.iterdir()
                       if child.suffix in SOURCE_SUFFIXES and not child.name.startswith((".", "_")))
            )
        else:
            found.append(path)
    return found


def display_path(path: Path) -> str:
    """A path as messages show it: relative to the working directory when inside it."""
    if path.is_absolute():
        with contextlib.suppress(ValueError):
            return str(path.relative_to(Path.cwd()))
    return str(path)


def load_source_file(path: str | Path) -> SourceConfig:
    """Read and validate one source file; raises :class:`SourceConfigError` naming file, line and field."""
    path = Path(path)
    display = display_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SourceConfigError([Problem(display, 1, ROOT_FIELD, f"cannot read the file: {error}")]) from None
    return parse_source(text, display)


def parse_source(text: str, file: str = "<string>") -> SourceConfig:
    """Validate the YAML text of one source; ``file`` is only used in messages."""
    document = _Document(file)
    try:
        data = document.load(text)
    except SourceConfigError:
        raise
    except (RecursionError, MemoryError) as error:  # nesting deeper than Python's stack, or than memory
        raise SourceConfigError([Problem(file, 1, ROOT_FIELD, f"too deeply nested to read ({type(error).__name__})")]
                                ) from None
    except Exception as error:  # a constructor or composer failure nobody foresaw: still this file's problem
        raise SourceConfigError([Problem(file, 1, ROOT_FIELD, f"cannot read the file: {type(error).__name__}: "
                                                              f"{error}")]) from None
    if not isinstance(data, dict):
        document.problem((), "a source file must be a YAML mapping of fields (name: ..., input: ...)")
    else:
        document.check_credentials(data, ())
    document.raise_if_any()
    try:
        return SourceConfig.model_validate(data)
    except ValidationError as error:
        for detail in error.errors():
            document.validation_problem(detail)
        document.raise_if_any()
        raise  # unreachable: a ValidationError always has details


def load_sources(directory: str | Path | None = None) -> SourceSet:
    """Load every ``*.yaml`` file of ``directory`` (default: settings.sources_dir).

    A bad file becomes an error in ``errors`` and never stops the others. Two files with the same
    source name: the first (in file-name order) keeps it, the second is an error naming both.
    """
    return load_source_paths([Path(directory) if directory is not None else default_directory()])


def load_source_paths(paths: Iterable[str | Path]) -> SourceSet:
    paths = [Path(path) for path in paths]
    caches = _source_caches(paths)
    result = SourceSet()
    for path in source_files(paths):
        try:
            source = _load_cached(path, caches.get(path.parent))
        except SourceConfigError as error:
            result.errors.append(error)
            continue
        if (first := result.files.get(source.name)) is not None:
            result.errors.append(SourceConfigError([Problem(
                display_path(path), _name_line(path), "name",
                f"duplicate source name {source.name!r}: also defined in {display_path(first)}",
            )]))
            continue
        result.sources[source.name] = source
        result.files[source.name] = path
    for cache in caches.values():
        cache.save()
    while upstream_problems := check_upstreams(result.sources, result.files):  # schedule.after: a drop may orphan more
        for name, path, line, reason in upstream_problems:
            result.errors.append(SourceConfigError([Problem(display_path(path), line, "schedule.after", reason)]))
            del result.sources[name], result.files[name]
    return result


def _source_caches(paths: list[Path]) -> dict[Path, SourceCache]:
    """The on-disk cache of each directory being loaded (harvester.config.cache), when one is configured."""
    from harvester.settings import get_settings

    cache_dir = get_settings().source_cache_dir
    if cache_dir is None:
        return {}
    return {path: SourceCache.for_directory(path, cache_dir) for path in paths if path.is_dir()}


def _load_cached(path: Path, cache: SourceCache | None) -> SourceConfig:
    """:func:`load_source_file`, answered from ``cache`` when the file's bytes (and the schema) are unchanged."""
    if cache is None:
        return load_source_file(path)
    try:
        data = path.read_bytes()
    except OSError:
        return load_source_file(path)  # reports the problem as usual
    key = content_key(data)
    if (source := cache.get(path.name, key)) is not None:
        return source
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        cache.discard(path.name)
        return load_source_file(path)
    try:
        source = parse_source(text, display_path(path))
    except SourceConfigError:
        cache.discard(path.name)
        raise
    cache.put(path.name, key, source)
    return source


def get_source(name: str, directory: str | Path | None = None) -> SourceConfig:
    """One source by name (workers and producers that only have the name).

    The usual layout, ``<name>.yaml``, is read alone; otherwise every file is scanned.
    """
    folder = Path(directory) if directory is not None else default_directory()
    for suffix in SOURCE_SUFFIXES:
        path = folder / f"{name}{suffix}"
        if path.is_file() and (source := load_source_file(path)).name == name:
            return source
    sources = load_sources(folder)
    if name in sources.sources:
        return sources.sources[name]
    for error in sources.errors:
        if Path(error.file).stem == name:
            raise error
    raise KeyError(f"no source named {name!r} in {folder}")


def _name_line(path: Path) -> int:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("name:"):
            return number
    return 1


class _Document:
    """One YAML document turned into Python values while remembering where each value was."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: dict[Location, int] = {}
        self.key_lines: dict[Location, int] = {}
        self.problems: list[Problem] = []

    def problem(self, location: Location, reason: str, line: int | None = None) -> None:
        self.problems.append(Problem(self.file, line or self.line_of(location), _field_name(location), reason))

    def raise_if_any(self) -> None:
        if self.problems:
            raise SourceConfigError(sorted(self.problems, key=lambda problem: problem.line))

    def line_of(self, location: Location) -> int:
        """The line of a value, or of its nearest written ancestor when the value itself is missing."""
        for end in range(len(location), -1, -1):
            prefix = location[:end]
            if prefix in self.key_lines:
                return self.key_lines[prefix]
            if prefix in self.lines:
                return self.lines[prefix]
        return 1

    def load(self, text: str) -> Any:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
            reason = " ".join(str(part) for part in (getattr(error, "context", None), getattr(error, "problem", None))
                              if part) or str(error)
            self.problems.append(Problem(self.file, mark.line + 1 if mark else 1, ROOT_FIELD,
                                         f"not valid YAML: {reason}"))
            self.raise_if_any()
        finally:
            loader.dispose()
        if node is None:
            self.problem((), "the file is empty")
            self.raise_if_any()
        self._check_expansion(node)
        self.raise_if_any()
        return self._value(loader, node, ())

    def _check_expansion(self, root: yaml.Node) -> None:
        """Refuse an alias that refers to the value containing it, and aliases that expand the file to
        more than MAX_EXPANDED_VALUES values; one pass over the node graph, each shared node once."""
        sizes: dict[int, int] = {}  # expanded size of every node finished so far
        running: dict[int, int] = {id(root): 1}
        on_path: set[int] = {id(root)}
        stack: list[tuple[yaml.Node, Location, Iterator[tuple[yaml.Node, Location]]]] = [
            (root, (), _children(root, ()))]
        while stack:
            node, location, children = stack[-1]
            child, child_location = next(children, (None, ()))
            if child is None:
                stack.pop()
                on_path.discard(id(node))
                sizes[id(node)] = running.pop(id(node))
                if stack:
                    parent, parent_location, _ = stack[-1]
                    running[id(parent)] += sizes[id(node)]
                    if running[id(parent)] > MAX_EXPANDED_VALUES:
                        return self._too_many(parent_location)
                continue
            if id(child) in on_path:
                self.problem(location, "an alias refers to itself (to the value that contains it)",
                             node.start_mark.line + 1)
                return None
            if id(child) in sizes:  # an alias of a node already measured: count it again, walk it once
                running[id(node)] += sizes[id(child)]
                if running[id(node)] > MAX_EXPANDED_VALUES:
                    return self._too_many(location)
                continue
            on_path.add(id(child))
            running[id(child)] = 1
            stack.append((child, child_location, _children(child, child_location)))
        return None

    def _too_many(self, location: Location) -> None:
        self.problem(location, f"aliases expand this file to more than {MAX_EXPANDED_VALUES:,} values "
                               "(an alias bomb?); write the values out or use fewer nested aliases")

    def _value(self, loader: Any, node: yaml.Node, location: Location) -> Any:
        self.lines.setdefault(location, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            if any(key_node.tag == _MERGE_TAG for key_node, _ in node.value):
                loader.flatten_mapping(node)
            mapping: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = key_node.value if key_node.tag == _STR_TAG else loader.construct_object(key_node, deep=True)
                if not isinstance(key, str | int | float | bool) or key is None:
                    self.problem(location, "mapping keys must be plain names", key_node.start_mark.line + 1)
                    continue
                child = (*location, str(key))
                if key in mapping:
                    self.problem(child, f"duplicate key (first on line {self.key_lines[child]})",
                                 key_node.start_mark.line + 1)
                    continue
                self.key_lines[child] = key_node.start_mark.line + 1
                mapping[key] = self._value(loader, value_node, child)
            return mapping
        if isinstance(node, yaml.SequenceNode):
            return [self._value(loader, item, (*location, index)) for index, item in enumerate(node.value)]
        # Plain strings are most scalars: skip the constructor's dispatch for them.
        try:
            value = node.value if node.tag == _STR_TAG else loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError) as error:  # e.g. the date 2024-02-30
            self.problem(location, f"cannot read the value {node.value!r}: {error}")
            return None
        if isinstance(value, str) and "${" in value:
            value = self._expand(value, location)
        return value

    def _expand(self, value: str, location: Location) -> str:
        """``${HARVESTER_X}`` becomes the setting ``x`` (its environment variable when set).

        Only declared settings: an attribute of the settings object (``${HARVESTER___DICT__}``) would
        paste every setting into the requests sent to a site. In a regex field the value is escaped.
        """
        from harvester.settings import HarvesterSettings, get_settings

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            setting = name.removeprefix("HARVESTER_").lower()
            if setting not in HarvesterSettings.model_fields:
                self.problem(location, f"${{{name}}} is not a Harvester setting (placeholders name declared "
                                       "settings only, see docs/sources.md)")
                return match.group(0)
            if setting in PLACEHOLDER_REFUSED:
                self.problem(location, f"${{{name}}} holds credentials, which never go into a source")
                return match.group(0)
            text = os.environ.get(name)
            if text is None:
                current = getattr(get_settings(), setting)
                if current is None:
                    self.problem(location, f"${{{name}}} is not set")
                    return match.group(0)
                text = str(current)
            return re.escape(text) if location in REGEX_FIELDS else text

        return _PLACEHOLDER.sub(replace, value)

    def check_credentials(self, value: Any, location: Location) -> None:
        """Reject a password-like key, an Authorization/Cookie header, or a URI carrying a password."""
        if isinstance(value, dict):
            for key, child in value.items():
                child_location = (*location, str(key))
                if location != ("attributes",) and location[:3] != _MONGO_FILTER:
                    in_headers = location == ("headers",) or _in_request(location, ("headers",))
                    filled_at_send = _in_request(location, ("json", "form")) and isinstance(child, str) \
                        and _CONNECTION_VALUE.fullmatch(child) is not None  # the connection's, never in YAML
                    if (_SECRET_KEY.search(str(key)) and not filled_at_send) or \
                            (in_headers and str(key).lower() in _SECRET_HEADERS):
                        self.problem(child_location, connections_hint(child_location))
                        continue
                self.check_credentials(child, child_location)
        elif isinstance(value, list):
            for index, child in enumerate(value):
                self.check_credentials(child, (*location, index))
        elif isinstance(value, str) and _URI_WITH_PASSWORD.search(value):
            self.problem(location, f"this URI carries a password; {connections_hint(location)}")

    def validation_problem(self, detail: dict[str, Any]) -> None:
        location: Location = tuple(detail["loc"])
        reason = str(detail["msg"]).removeprefix("Value error, ")
        # Cross-field rules say which field they are about: "country: a browser source needs...".
        if detail["type"] == "value_error" and (match := re.match(r"^([a-z_][a-z0-9_.]*): (.+)$", reason, re.S)):
            location = (*location, *match.group(1).split("."))
            reason = match.group(2)
        if detail["type"] == "extra_forbidden":
            reason = f"unknown key (a typo?); allowed here: {_allowed_keys(location[:-1])}"
        elif detail["type"] == "missing":
            reason = "required field is missing"
        self.problem(location, reason)


def _children(node: yaml.Node, location: Location) -> Iterator[tuple[yaml.Node, Location]]:
    """The nodes directly inside ``node`` with the location each gives its value (merges share it)."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            yield key_node, location
            merged = key_node.tag == _MERGE_TAG
            key = (key_node.value if isinstance(key_node, yaml.ScalarNode) else "?")
            yield value_node, (location if merged else (*location, str(key)))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield item, (*location, index)


def _field_name(location: Location) -> str:
    if not location:
        return ROOT_FIELD
    name = ""
    for part in location:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name


def _allowed_keys(location: Location) -> str:
    """The field names of the model at ``location`` (for 'unknown key' messages)."""
    model: Any = SourceConfig
    for part in location:
        if isinstance(part, int):
            continue
        field_info = getattr(model, "model_fields", {}).get(part)
        if field_info is None:
            continue  # a key of a mapping of models (attributes.<name>): the model stays
        model = _model_of(field_info.annotation)
    return ", ".join(getattr(model, "model_fields", {}))


def _model_of(annotation: Any) -> Any:
    from typing import get_args

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in get_args(annotation):
        if (found := _model_of(argument)) is not None:
            return found
    return None


def iter_problems(errors: Iterable[SourceConfigError]) -> Iterator[Problem]:
    for error in errors:
        yield from error.problems
