"""Every bench runs in CI in its smoke mode, so a bench that crashes or loses a figure fails the suite.

Nothing else runs a bench between two people who record its figures, and a bench broken by a merge (a
helper moved, a result key renamed) stayed broken until someone needed its numbers. So each module of
``bench/`` says what it is, at module level, in one of two literals this file reads with ``ast`` (it imports no
bench: they start servers and import peers that live in venvs of their own):

- ``PROMISED_KEYS = ("key", ...)``: a bench. Every key of the JSON object on its last line; ``{name}`` in a
  key stands for the value of the line's own key ``name`` (bench/scale.py's ``parse_ratio_{sources}``). The
  bench takes ``--smoke``: a few pages, one round, peers skipped where installing them takes minutes (their
  figures are then null, never absent). Each is run here with ``--smoke`` as a real subprocess. A bench whose
  input lives outside the repository and is absent prints ``{"skipped": "why"}`` instead, and its test is
  skipped with that reason (shown in the summary, ``-ra``).
- ``NOT_A_BENCH = "what it is"``: the shared rig, a helper, or a peer a bench runs.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH_FOLDER = ROOT / "bench"
# The slowest smoke run takes about 30 s of CPU; a bench still running after this is stuck, not slow.
SMOKE_TIMEOUT_SECONDS = 480
INTERRUPTED_GRACE_SECONDS = 30  # a bench stops the servers it started when interrupted (its finally blocks)


@dataclass(frozen=True)
class BenchDeclaration:
    """What one module of bench/ declares: its promised keys (a bench) or what it is instead."""

    path: Path
    promised_keys: tuple[str, ...] | None = None
    not_a_bench: str | None = None
    problem: str | None = None


def read_declaration(path: Path) -> BenchDeclaration:
    """The module-level ``PROMISED_KEYS`` / ``NOT_A_BENCH`` of ``path``, or the problem with them."""
    values: dict[str, Any] = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(
            node, "target", None)
        if isinstance(target, ast.Name) and target.id in ("PROMISED_KEYS", "NOT_A_BENCH") and node.value is not None:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                return BenchDeclaration(path, problem=f"{target.id} is not a literal (line {node.lineno})")
    keys, role = values.get("PROMISED_KEYS"), values.get("NOT_A_BENCH")
    if keys is None and role is None:
        return BenchDeclaration(path, problem="declares neither PROMISED_KEYS (a bench: the keys of its JSON "
                                              "line) nor NOT_A_BENCH (a helper or a peer: what it is)")
    if keys is not None and role is not None:
        return BenchDeclaration(path, problem="declares both PROMISED_KEYS and NOT_A_BENCH")
    if role is not None:
        if not isinstance(role, str) or not role.strip():
            return BenchDeclaration(path, problem="NOT_A_BENCH must say in words what the module is")
        return BenchDeclaration(path, not_a_bench=role)
    if not isinstance(keys, tuple) or not keys or not all(isinstance(key, str) and key for key in keys):
        return BenchDeclaration(path, problem="PROMISED_KEYS must be a non-empty tuple of key names")
    if len(set(keys)) != len(keys):
        return BenchDeclaration(path, problem="PROMISED_KEYS names a key twice")
    return BenchDeclaration(path, promised_keys=keys)


def declarations(folder: Path = BENCH_FOLDER) -> list[BenchDeclaration]:
    return [read_declaration(path) for path in sorted(folder.glob("*.py"))]


def benches(folder: Path = BENCH_FOLDER) -> dict[str, tuple[str, ...]]:
    """Bench name (its file's stem) -> its promised keys."""
    return {found.path.stem: found.promised_keys for found in declarations(folder) if found.promised_keys}


def missing_keys(promised: tuple[str, ...], line: dict[str, Any]) -> list[str]:
    """The promised keys ``line`` lacks, each with its ``{name}`` filled from the line itself."""
    missing = []
    for key in promised:
        try:
            name = key.format(**line)
        except KeyError as absent:
            missing.append(f"{key} (the line has no {absent.args[0]} to fill it with)")
            continue
        if name not in line:
            missing.append(name)
    return missing


def last_json_line(stdout: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise AssertionError("the bench printed nothing on stdout")
    try:
        line = json.loads(lines[-1])
    except json.JSONDecodeError as error:
        raise AssertionError(f"the last line is not JSON ({error}): {lines[-1][:500]}") from error
    if not isinstance(line, dict):
        raise AssertionError(f"the last line is JSON but not an object: {lines[-1][:500]}")
    return line


def smoke_environment() -> dict[str, str]:
    """This checkout's code first on the path; no HARVESTER_* a fixture exported, but a MongoDB the run was
    given (HARVESTER_MONGO_URI, which the benches use as the suite's servers do)."""
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith("HARVESTER_") or name == "HARVESTER_MONGO_URI"}
    paths = [str(ROOT / "include"), str(ROOT / "demo"), environment.get("PYTHONPATH", "")]
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    return environment


def run_smoke(bench: str) -> subprocess.CompletedProcess[str]:
    """``bench/<bench>.py --smoke`` to its end; interrupted (SIGINT, so it stops its servers) when stuck."""
    process = subprocess.Popen([sys.executable, str(BENCH_FOLDER / f"{bench}.py"), "--smoke"], cwd=ROOT,
                               env=smoke_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL)
    try:
        stdout, stderr = process.communicate(timeout=SMOKE_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        try:
            stdout, stderr = process.communicate(timeout=INTERRUPTED_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        pytest.fail(f"bench/{bench}.py --smoke still ran after {SMOKE_TIMEOUT_SECONDS} s:\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def module_literal(path: Path, name: str) -> Any:
    """The literal a module assigns to ``name`` at module level, read with ``ast`` (this file imports no bench)."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == name):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.name} assigns no {name}")


def suggest_figures_the_table_needs(line: dict[str, Any]) -> None:
    """bench/suggest.py's smoke pages are a spread sample of the corpus: each gets a named record with no chrome
    attribute, and the benchmark's published table rides along for docs/benchmarks.md's comparison."""
    smoke_pages = module_literal(BENCH_FOLDER / "suggest.py", "SMOKE_PAGES")
    assert line["pages"] == smoke_pages and line["name_share"] >= 0.9 and line["chrome_attributes"] == 0, line
    assert line["published"]["zyte_automatic_extraction"]["price_f1"] == 0.918, line["published"]


# What a bench's smoke line must also hold, beyond its promised keys (checks on the figures' values).
SMOKE_VALUE_CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {"suggest": suggest_figures_the_table_needs}


@pytest.mark.unit
def test_every_module_of_bench_says_whether_it_is_a_bench() -> None:
    problems = [f"bench/{found.path.name}: {found.problem}" for found in declarations() if found.problem]
    assert not problems, "\n".join(problems)
    assert benches(), "no bench declares PROMISED_KEYS"


@pytest.mark.unit
def test_a_module_that_does_not_say_what_it_is_is_named(tmp_path: Path) -> None:
    modules = {
        "bench_ok.py": 'PROMISED_KEYS = ("pages", "ratio_{pages}")\n',
        "peer_ok.py": 'NOT_A_BENCH = "the peer of bench_ok"\n',
        "new_bench.py": 'import json\nprint(json.dumps({"pages": 1}))\n',
        "both.py": 'PROMISED_KEYS = ("pages",)\nNOT_A_BENCH = "a helper"\n',
        "a_list.py": 'PROMISED_KEYS = ["pages"]\n',
        "computed.py": 'KEYS = ("pages",)\nPROMISED_KEYS = KEYS\n',
        "silent_helper.py": 'NOT_A_BENCH = ""\n',
    }
    for name, text in modules.items():
        (tmp_path / name).write_text(text)

    found = {declaration.path.name: declaration for declaration in declarations(tmp_path)}

    assert {name for name, declaration in found.items() if declaration.problem} == {
        "new_bench.py", "both.py", "a_list.py", "computed.py", "silent_helper.py"}
    assert benches(tmp_path) == {"bench_ok": ("pages", "ratio_{pages}")}


@pytest.mark.unit
def test_a_line_that_lacks_a_promised_key_is_caught() -> None:
    promised = ("bench", "ratio", "parse_ratio_{sources}")

    assert missing_keys(promised, {"bench": "scale", "ratio": None, "sources": 40, "parse_ratio_40": 1.1}) == []
    assert missing_keys(promised, {"bench": "scale", "sources": 40, "parse_ratio_5000": 1.1}) == [
        "ratio", "parse_ratio_40"]
    assert missing_keys(promised, {"bench": "scale", "ratio": 1}) == [
        "parse_ratio_{sources} (the line has no sources to fill it with)"]
    with pytest.raises(AssertionError, match="not an object"):
        last_json_line('starting\n[1, 2]\n')


@pytest.mark.unit
def test_the_suggest_smoke_line_is_checked_for_its_values_too() -> None:
    pages = module_literal(BENCH_FOLDER / "suggest.py", "SMOKE_PAGES")
    good = {"pages": pages, "name_share": 1.0, "chrome_attributes": 0,
            "published": {"zyte_automatic_extraction": {"price_f1": 0.918}}}
    SMOKE_VALUE_CHECKS["suggest"](good)
    for wrong in ({"pages": pages + 1}, {"name_share": 0.5}, {"chrome_attributes": 1},
                  {"published": {"zyte_automatic_extraction": {"price_f1": 0.9}}}):
        with pytest.raises(AssertionError):
            SMOKE_VALUE_CHECKS["suggest"](good | wrong)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("bench", sorted(benches()))
def test_each_bench_runs_in_its_smoke_mode_and_prints_every_promised_key(bench: str) -> None:
    completed = run_smoke(bench)

    assert completed.returncode == 0, (f"bench/{bench}.py --smoke exited {completed.returncode}:\n"
                                       f"{completed.stderr[-4000:]}")
    line = last_json_line(completed.stdout)
    if set(line) == {"skipped"}:
        pytest.skip(f"bench/{bench}.py --smoke: {line['skipped']}")
    assert not missing_keys(benches()[bench], line), (
        f"bench/{bench}.py --smoke: its JSON line lacks {missing_keys(benches()[bench], line)}: {line}")
    SMOKE_VALUE_CHECKS.get(bench, lambda line: None)(line)
