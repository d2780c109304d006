"""How the package catches errors, read from the source with ``ast`` (every ``except`` and every
``contextlib.suppress``, top level or nested):

- callers catch the project's errors (``StorageError``, ``StorageUnavailableError``, ...): a redis-py or
  pymongo exception class is caught only in the boundary modules below, where Harvester itself talks to
  the backend and wraps what it does not handle (``harvester.errors.redis_storage_errors`` /
  ``mongo_storage_errors``);
- a broad catch (a bare ``except``, ``Exception``, ``BaseException``, ``suppress(Exception)``) says why on
  its own line, in a trailing comment.
"""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize
from dataclasses import dataclass

import pytest
from harvester.settings import REPOSITORY_ROOT

pytestmark = pytest.mark.unit

PACKAGE = REPOSITORY_ROOT / "include" / "harvester"
BACKEND_PACKAGES = ("redis", "pymongo")
BROAD = ("Exception", "BaseException")

# Where a backend's own exception classes may be caught, and why there.
BACKEND_BOUNDARY: dict[str, str] = {
    "errors.py": "the wrappers themselves: redis-py and pymongo errors become StorageError",
    "connections/clients.py": "the client factory: pymongo's server-selection failure becomes MongoUnavailableError",
    "redis_scripts/calls.py": "the script runner: NOSCRIPT means load the scripts again and retry once",
    "storage/data_handler.py": "a bulk upsert's BulkWriteError names the documents that failed (inside the wrapper)",
    "storage/packages.py": "a bulk insert's BulkWriteError tells duplicates from failures (inside the wrapper)",
    "storage/changes.py": "a history insert's BulkWriteError tells a retried batch's duplicates from failures "
                          "(inside the data handler's wrapper)",
    "storage/archive_index.py": "dropping a superseded index: IndexNotFound means another worker process dropped it "
                                "first, which is success (inside the wrapper)",
}
# Files whose catches are still being rewritten; each leaves this list once its catches follow the rules.
NOT_YET_CONVERTED: dict[str, str] = {}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str  # "backend" or "broad"
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.text}"


def _backend_names(tree: ast.AST) -> set[str]:
    """Local names bound to a backend module or to something imported from one."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names
                      if alias.name.split(".")[0] in BACKEND_PACKAGES}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                and node.module.split(".")[0] in BACKEND_PACKAGES:
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _root(expression: ast.expr) -> str | None:
    while isinstance(expression, ast.Attribute):
        expression = expression.value
    return expression.id if isinstance(expression, ast.Name) else None


def _caught(expression: ast.expr | None) -> list[ast.expr]:
    if isinstance(expression, ast.Tuple):
        return [item for element in expression.elts for item in _caught(element)]
    return [] if expression is None else [expression]


def _is_suppress(call: ast.Call) -> bool:
    function = call.func
    return (isinstance(function, ast.Name) and function.id == "suppress") or (
        isinstance(function, ast.Attribute) and function.attr == "suppress" and _root(function) == "contextlib")


def findings(source: str, path: str = "<source>") -> list[Finding]:
    """Every catch of a backend class, and every broad catch without a comment on its line."""
    tree = ast.parse(source)
    backend = _backend_names(tree)
    commented = {token.start[0] for token in tokenize.generate_tokens(io.StringIO(source).readline)
                 if token.type == tokenize.COMMENT}
    lines = source.splitlines()
    found: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler):
            caught, bare = _caught(node.type), node.type is None
            head = range(node.lineno, max(node.lineno, node.body[0].lineno - 1) + 1)  # `except (A,\n B):`
        elif isinstance(node, ast.Call) and _is_suppress(node):
            caught, bare = list(node.args), False
            head = range(node.lineno, (node.end_lineno or node.lineno) + 1)
        else:
            continue
        text = lines[node.lineno - 1].strip()
        if any(_root(expression) in backend for expression in caught):
            found.append(Finding(path, node.lineno, "backend", text))
        broad = bare or any(isinstance(expression, ast.Name) and expression.id in BROAD for expression in caught)
        if broad and not any(line in commented for line in head):
            found.append(Finding(path, node.lineno, "broad", text))
    return sorted(found, key=lambda finding: (finding.line, finding.rule))


def package_findings() -> dict[str, list[Finding]]:
    by_file: dict[str, list[Finding]] = {}
    for module in sorted(PACKAGE.rglob("*.py")):
        path = module.relative_to(PACKAGE).as_posix()
        found = [finding for finding in findings(module.read_text(encoding="utf-8"), path)
                 if not (finding.rule == "backend" and path in BACKEND_BOUNDARY)]
        if found:
            by_file[path] = found
    return by_file


def test_the_checker_finds_backend_catches_and_broad_catches_without_a_reason():
    source = textwrap.dedent("""
        import contextlib
        import redis
        import pymongo.errors
        from redis.exceptions import ResponseError as Refused
        from harvester.errors import StorageError

        def f():
            try: pass
            except redis.RedisError: pass
            try: pass
            except (StorageError,
                    pymongo.errors.PyMongoError): pass
            try: pass
            except Refused: pass
            try: pass
            except redis.exceptions.ConnectionError: pass
            with contextlib.suppress(redis.RedisError): pass
            try: pass
            except Exception: pass
            try: pass
            except: pass
            try: pass
            except (ValueError, BaseException) as error: raise
            with contextlib.suppress(Exception): pass
            try: pass
            except StorageError: pass
            try: pass
            except Exception:  # a reason
                pass
            with contextlib.suppress(Exception):  # a reason
                pass
    """)
    found = [(finding.line, finding.rule) for finding in findings(source)]
    assert found == [(10, "backend"), (12, "backend"), (15, "backend"), (17, "backend"), (18, "backend"),
                     (20, "broad"), (22, "broad"), (24, "broad"), (25, "broad")]


def test_callers_catch_the_projects_errors_and_every_broad_catch_says_why():
    """A caller catches StorageError (the wrapped error is still a redis-py / pymongo one); a call that
    is not wrapped yet gets the wrapper where Harvester talks to the backend. A broad catch names its reason."""
    offending = [str(finding) for path, found in package_findings().items() if path not in NOT_YET_CONVERTED
                 for finding in found]
    assert offending == []


def test_the_lists_of_exceptions_stay_true():
    """Every boundary module exists; a file listed as not yet converted still needs it (else it leaves the list)."""
    assert [path for path in BACKEND_BOUNDARY if not (PACKAGE / path).is_file()] == []
    remaining = package_findings()
    assert [path for path in NOT_YET_CONVERTED if path not in remaining] == []
