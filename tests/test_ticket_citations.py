"""Comments and docstrings say why, not which ticket: "issue N" means nothing to a reader of the code.

The code folders are read as text; a citation of a ticket ("issue N", "issues N and M", "ticket N", "(#N)")
fails with its ``file:line``. Say the reason in a few words instead. The history of what changed when belongs
in ``docs/`` (``docs/benchmarks.md`` keeps each run's issue, a changelog may too), which is not read here.
An upstream project's issue (``celery/celery#N``) names where to read more, and stays allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
CODE_FOLDERS = ("include", "tests", "bench", "demo", "dags", "plugins")
# Vendored, minified third-party code is not ours to word (chart.js holds colours such as #666).
NOT_OURS = ("*.min.js",)
TICKET_CITATION = re.compile(
    r"\b(?:issues?|tickets?|pull requests?|PRs?)\s*#?\d+\b"  # issue N, Issue N's, issues N and M, PR N
    r"|(?<![\w/])\(#\d+[),;]|\bsee #\d+\b",  # (#N), see #N; not owner/repo#N
    re.IGNORECASE)


def ticket_citations(root: Path, folders: tuple[str, ...] = CODE_FOLDERS) -> list[str]:
    """``file:line: text`` of every ticket citation in the text files under ``folders``."""
    found: list[str] = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if not path.is_file() or any(path.match(pattern) for pattern in NOT_OURS) or "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:  # fonts, images: no prose in them
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if TICKET_CITATION.search(line):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_no_comment_or_docstring_cites_a_ticket() -> None:
    citations = ticket_citations(ROOT)
    assert not citations, ("say the reason instead of the ticket (history goes to docs/):\n"
                           + "\n".join(citations))


def test_the_reader_finds_each_form_of_citation_and_leaves_the_rest(tmp_path: Path) -> None:
    """The check can fail: each form a ticket is cited in is found, with its file and line; an upstream
    project's issue, a colour, a fault-matrix row and an HTML entity are not citations."""
    word = "issue"  # spelt apart, so this file does not cite a ticket itself
    cited = [f"# the cap ({word} {23})", f'"""{word.title()} {22}\'s richer types."""',
             f"# ({word}s {11} and {24})", f"# refused (#{12})", f"# see #{12}", f"# ticket {7}"]
    clean = ["# kombu loses it (celery/celery#4354)", 'COLOUR = "#666"', "# fault-matrix row 11",
             "'&#39;'", "# an issue we fix by hand"]
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "example.py").write_text("\n".join(cited + clean) + "\n")
    (tmp_path / "bench" / "vendored.min.js").write_text(f"// {word} {5}\n")

    found = ticket_citations(tmp_path, ("bench",))

    assert [entry.split(": ", 1)[0] for entry in found] == [f"bench/example.py:{line}"
                                                            for line in range(1, len(cited) + 1)]
