"""Where the public conformance material lives (``../shared/corpora``), if it does: tests that read it skip
without it, as a user's clone has none."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def corpora_folder() -> Path | None:
    """``../shared/corpora`` beside the repository, or beside its main checkout when this is a git worktree."""
    roots = [ROOT]
    git = ROOT / ".git"
    if git.is_file() and (line := git.read_text().strip()).startswith("gitdir:"):
        roots.append(Path(line.split(":", 1)[1].strip()).parents[2])  # <main>/.git/worktrees/<name>
    for root in roots:
        if (root.parent / "shared" / "corpora").is_dir():
            return root.parent / "shared" / "corpora"
    return None


def corpus_file(relative: str) -> Path:
    """A corpus file, or the test skips."""
    folder = corpora_folder()
    if folder is None or not (folder / relative).is_file():
        pytest.skip(f"../shared/corpora/{relative} is absent (only the project's own machines have it)")
    return folder / relative
