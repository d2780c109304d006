"""Which robots.txt rules apply to a URL, decided as Google's reference parser (google/robotstxt) decides it.

RFC 9309 was written from that parser, and its test suite is what ``bench/realdata.py`` scores us against.
Two points where a general-purpose parser (protego, which we used for this before) differs on purpose:

- **Patterns are normalised, paths are not.** A rule's pattern is read as UTF-8 bytes: each byte outside ASCII
  becomes ``%XX`` and an escape already written keeps its byte with upper-case hex (``/ツ`` and ``/%e3%83%84``
  both become ``/%E3%83%84``); no escape is ever decoded (``/%62%61%7A`` is not ``/baz``). The URL's path is
  compared as it is given. A crawler's URLs are percent-encoded already (ours are canonical URLs), so
  ``/%E3%83%84`` matches and a raw ``/ツ`` does not, exactly as Googlebot would see the request line. Protego
  decoded and re-encoded both sides, so it allowed what Google disallows.
- **Groups**: every group that names our product token (without case) is merged, and if any did, the ``*``
  groups are ignored even when ours have no rules. The longest matching pattern wins, an Allow on a tie.

The text given here is already :func:`harvester.scraping.fetching.robots.as_google_reads`'s (lines cut, User-agent
values cut to their product token, unknown keys dropped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEX = frozenset(b"0123456789abcdefABCDEF")
_PATH_STARTS = re.compile(r"[/?;]")
USER_AGENT_KEYS = frozenset({"user-agent", "useragent", "user agent"})
ALLOW_KEYS = frozenset({"allow"})
DISALLOW_KEYS = frozenset({"disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw"})


def escape_pattern(pattern: str) -> str:
    """Google's ``MaybeEscapePattern``: the pattern's UTF-8 bytes, each byte >= 0x80 as ``%XX`` and each
    ``%xx`` escape with its hex upper-cased; nothing decoded, ASCII left as written."""
    data = pattern.encode("utf-8", errors="surrogateescape")
    out: list[str] = []
    index = 0
    while index < len(data):
        byte = data[index]
        if byte == 0x25 and index + 2 < len(data) and data[index + 1] in _HEX and data[index + 2] in _HEX:
            out.append("%" + data[index + 1:index + 3].decode("ascii").upper())
            index += 3
            continue
        out.append(f"%{byte:02X}" if byte >= 0x80 else chr(byte))
        index += 1
    return "".join(out)


def path_params_query(url: str) -> str:
    """Google's ``GetPathParamsQuery``: the path, params and query of ``url`` as written (no decoding, no
    encoding), the fragment dropped, ``/`` when there is none, a ``/`` put before one that starts with ``?``/``;``."""
    search_start = 2 if url.startswith("//") else 0
    early_path = _PATH_STARTS.search(url, search_start)
    protocol_end = url.find("://", search_start)
    if early_path is not None and early_path.start() < protocol_end:
        protocol_end = -1  # a "://" inside the path or query is not the scheme's
    protocol_end = search_start if protocol_end == -1 else protocol_end + 3
    path_start = _PATH_STARTS.search(url, protocol_end)
    if path_start is None:
        return "/"
    start = path_start.start()
    hash_position = url.find("#", search_start)
    if 0 <= hash_position < start:
        return "/"
    path = url[start:hash_position if hash_position >= 0 else len(url)]
    return path if path.startswith("/") else "/" + path


@dataclass(frozen=True)
class RobotsPattern:
    """One Allow/Disallow pattern, escaped; ``*`` any run of characters, a final ``$`` the path's end.
    Matched without backtracking (leftmost occurrence of each literal piece), linear in the path."""

    pattern: str
    allow: bool
    pieces: tuple[str, ...] = field(init=False)
    anchored: bool = field(init=False)

    def __post_init__(self) -> None:
        anchored = self.pattern.endswith("$")
        body = self.pattern[:-1] if anchored else self.pattern
        object.__setattr__(self, "anchored", anchored)
        object.__setattr__(self, "pieces", tuple(re.sub(r"\*+", "*", body).split("*")))

    @property
    def priority(self) -> int:
        """Google ranks a match by the escaped pattern's length."""
        return len(self.pattern)

    def matches(self, path: str) -> bool:
        first, *middle = self.pieces
        if not path.startswith(first):
            return False
        if not middle:
            return path == first if self.anchored else True
        position = len(first)
        *inner, last = middle
        for piece in inner:
            found = path.find(piece, position)
            if found < 0:
                return False
            position = found + len(piece)
        if self.anchored:
            return len(path) - len(last) >= position and path.endswith(last)
        return path.find(last, position) >= 0


def _key_and_value(line: str) -> tuple[str, str] | None:
    """A line's key (lower-cased, inner blanks single) and value, as Google's ``GetKeyAndValueFrom`` splits it:
    at the first ``:``, or with no colon at the blank between exactly two words (``Disallow /x``)."""
    content = line.split("#", 1)[0].strip()
    key, colon, value = content.partition(":")
    if not colon:
        words = content.split()
        if len(words) != 2:
            return None
        key, value = words
    key = " ".join(key.split()).lower()
    return (key, value.strip()) if key else None


@dataclass
class _Group:
    agents: list[str] = field(default_factory=list)
    rules: list[RobotsPattern] = field(default_factory=list)


def _groups(text: str) -> list[_Group]:
    """The file's groups: User-agent lines in a row open one, the rules after them fill it; a rule before any
    User-agent line belongs to nobody (Google ignores it)."""
    groups: list[_Group] = []
    collecting_agents = False
    for line in text.splitlines():
        parsed = _key_and_value(line)
        if parsed is None:
            continue
        key, value = parsed
        if key in USER_AGENT_KEYS:
            if not collecting_agents:
                groups.append(_Group())
                collecting_agents = True
            groups[-1].agents.append(value.lower())
        elif key in ALLOW_KEYS | DISALLOW_KEYS and groups:
            collecting_agents = False
            allow = key in ALLOW_KEYS
            groups[-1].rules.append(RobotsPattern(escape_pattern(value), allow))
            if allow and (slash := value.rfind("/")) >= 0 and value[slash:].startswith("/index.htm"):
                # Google reads "Allow: /d/index.htm(l)" as allowing "/d/" too
                groups[-1].rules.append(RobotsPattern(escape_pattern(value[:slash + 1]) + "$", True))
    return groups


class GoogleRobotsMatcher:
    """One robots.txt's Allow/Disallow rules, answering per product token as Google's ``RobotsMatcher`` does.
    The rules that apply to a token are gathered once and kept (a crawler asks with one token)."""

    def __init__(self, text: str) -> None:
        self._groups = _groups(text)
        self._rules_by_token: dict[str, tuple[RobotsPattern, ...]] = {}

    def rules_for(self, token: str) -> tuple[RobotsPattern, ...]:
        """The merged rules of the groups naming ``token``; those of the ``*`` groups when none names it."""
        token = token.lower()
        if (rules := self._rules_by_token.get(token)) is None:
            specific = [group for group in self._groups if token != "*" and token in group.agents]
            chosen = specific or [group for group in self._groups if "*" in group.agents]
            rules = self._rules_by_token[token] = tuple(rule for group in chosen for rule in group.rules)
        return rules

    def allowed(self, url: str, token: str) -> bool:
        """Whether ``token`` may fetch ``url``: the longest matching pattern decides, an Allow on a tie; an
        empty pattern matches with priority 0, which decides nothing (allowed)."""
        path = path_params_query(url)
        best_allow = best_disallow = -1
        for rule in self.rules_for(token):
            if rule.priority <= (best_allow if rule.allow else best_disallow) or not rule.matches(path):
                continue
            if rule.allow:
                best_allow = rule.priority
            else:
                best_disallow = rule.priority
        if best_allow <= 0 and best_disallow <= 0:
            return True
        return best_disallow <= best_allow
