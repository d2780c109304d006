"""The ``browser:`` section of a source (DESIGN.md section 12): when a rendered page is ready, what to do before
extracting, and how a visit is isolated. Only ``render: browser`` sources have one; every field has a default.

Selectors are written as attributes are (CSS, with parsel's ``::text``/``::attr()`` allowed, or XPath after
``xpath:``), and the browser evaluates them as XPath (parsel's own translation of the CSS), so what
``harvester try`` extracts is what the browser waited for.

In YAML an action is one key (``scroll``, ``click``, ``dismiss``, ``wait``) with its settings or a shorthand;
in the model it is a spec with a ``kind`` (the key), so an error reads ``browser.actions[0].click.max``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from harvester.config.attributes import XPATH_PREFIX, check_selector

MAX_ACTION_COUNT = 100
MAX_WAIT_MS = 30_000
ActionPages = Literal["all", "listing", "details"]
_PAGES = Field(default="all", description="Which pages the action runs on: all, listing or details.")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _compiles(value: str) -> str:
    return check_selector(value)  # the attributes' own check


Selector = Annotated[str, AfterValidator(_compiles)]


# -- wait_for --------------------------------------------------------------------------------------------
class SelectorWait(_Strict):
    """Ready when an element matching the selector is ``visible`` (laid out, not hidden) or ``attached``."""

    kind: Literal["selector"] = "selector"
    css: str | None = None
    xpath: str | None = None
    state: Literal["visible", "attached"] = "visible"

    @model_validator(mode="after")
    def _one_selector(self) -> SelectorWait:
        if (self.css is None) == (self.xpath is None):
            raise ValueError("give exactly one of css or xpath")
        _compiles(self.selector)
        return self

    @property
    def selector(self) -> str:
        """In the attributes' notation: CSS, or ``xpath:`` and the XPath."""
        return self.css if self.css is not None else XPATH_PREFIX + str(self.xpath)

    def describe(self) -> str:
        return f"{'css' if self.css is not None else 'xpath'} {self.css or self.xpath} ({self.state})"


class NetworkIdleWait(_Strict):
    """Ready when the page has had no request in flight for 500 ms (Playwright's ``networkidle``)."""

    kind: Literal["network_idle"] = "network_idle"

    def describe(self) -> str:
        return "network idle"


class DelayWait(_Strict):
    """Ready this long after ``load``: the last resort (slow when the page is early, wrong when it is late)."""

    kind: Literal["delay"] = "delay"
    delay_ms: int = Field(ge=0, le=MAX_WAIT_MS)

    def describe(self) -> str:
        return f"a delay of {self.delay_ms} ms"


WAIT_FOR_JSON_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"const": "network_idle", "description": "No request in flight for 500 ms."},
        {"type": "object", "additionalProperties": False, "minProperties": 1,
         "properties": {"css": {"type": "string"}, "xpath": {"type": "string"},
                        "state": {"enum": ["visible", "attached"], "default": "visible"}},
         "description": "css or xpath (exactly one): ready when it is visible (the default) or attached."},
        {"type": "object", "additionalProperties": False, "required": ["delay_ms"],
         "properties": {"delay_ms": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS}},
         "description": "Ready this many milliseconds after load."},
    ],
}
WaitFor = Annotated[SelectorWait | NetworkIdleWait | DelayWait, Field(discriminator="kind"),
                    WithJsonSchema(WAIT_FOR_JSON_SCHEMA)]


def _wait_kind(value: Any) -> Any:
    """``network_idle`` / ``{delay_ms: N}`` / ``{css|xpath: ..., state: ...}`` as the model's tagged specs."""
    if value == "network_idle":
        return {"kind": "network_idle"}
    if isinstance(value, dict) and "kind" not in value:
        return {"kind": "delay" if "delay_ms" in value else "selector", **value}
    return value


# -- actions -----------------------------------------------------------------------------------------------
class ScrollSpec(_Strict):
    """Scroll to the bottom until the page stops growing, at most max times (infinite scroll)."""

    kind: Literal["scroll"] = "scroll"
    max: int = Field(default=10, ge=1, le=MAX_ACTION_COUNT, description="Scrolls to the bottom, at most.")
    wait_ms: int = Field(default=1000, ge=0, le=MAX_WAIT_MS,
                         description="After each scroll, how long the page may take to grow (a listing's links, "
                                     "else its elements); scrolling stops when it does not.")
    on: ActionPages = _PAGES


class ClickSpec(_Strict):
    """Click while the element is there, at most max times (a 'load more' button)."""

    kind: Literal["click"] = "click"
    selector: Selector = Field(description="What to click (CSS or xpath:...), again while it is there, at most "
                                           "max times.")
    max: int = Field(default=10, ge=1, le=MAX_ACTION_COUNT)
    wait_ms: int = Field(default=1000, ge=0, le=MAX_WAIT_MS,
                         description="After each click, how long the page may take to grow.")
    on: ActionPages = _PAGES


class DismissSpec(_Strict):
    """Click once if it shows (a consent banner)."""

    kind: Literal["dismiss"] = "dismiss"
    selector: Selector = Field(description="A banner's button (CSS or xpath:...): clicked once if it shows.")
    wait_ms: int = Field(default=0, ge=0, le=MAX_WAIT_MS, description="How long the banner may take to show.")
    on: ActionPages = _PAGES


class WaitSpec(_Strict):
    """Wait this many milliseconds."""

    kind: Literal["wait"] = "wait"
    ms: int = Field(ge=0, le=MAX_WAIT_MS)
    on: ActionPages = _PAGES


ACTION_SPECS: dict[str, type[_Strict]] = {"scroll": ScrollSpec, "click": ClickSpec, "dismiss": DismissSpec,
                                          "wait": WaitSpec}
SHORTHAND_FIELDS = {"scroll": "max", "click": "selector", "dismiss": "selector", "wait": "ms"}


def _spec_json_schema(key: str, spec: type[_Strict]) -> dict[str, Any]:
    """The YAML form of one action: ``{key: {settings}}`` or ``{key: shorthand}`` (no ``kind``)."""
    schema = spec.model_json_schema()
    schema["properties"].pop("kind")
    schema.pop("title", None)
    description = schema.pop("description", f"The {key} action.")
    shorthand = schema["properties"][SHORTHAND_FIELDS[key]]
    return {"type": "object", "additionalProperties": False, "required": [key],
            "properties": {key: {"anyOf": [{k: v for k, v in shorthand.items() if k != "description"}, schema]}},
            "description": description}


class _ActionYamlSchema:
    """The JSON schema of an action in its YAML form, built when a schema is asked for (``harvester schema``),
    not at import: building it costs every DAG parse that imports the config ~10-20 ms otherwise."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        return action_json_schema()


def action_json_schema() -> dict[str, Any]:
    return {"oneOf": [_spec_json_schema(key, spec) for key, spec in ACTION_SPECS.items()]}


Action = Annotated[ScrollSpec | ClickSpec | DismissSpec | WaitSpec, Field(discriminator="kind"),
                   _ActionYamlSchema()]


def _action_kind(value: Any) -> Any:
    """``{click: "button.more"}`` / ``{click: {selector: ..., max: 3}}`` as ``{kind: click, selector: ...}``."""
    if not isinstance(value, dict) or "kind" in value:
        return value
    if len(value) != 1 or next(iter(value)) not in ACTION_SPECS:
        given = ", ".join(map(str, value)) or "none"
        raise ValueError(f"an action is one key of {', '.join(ACTION_SPECS)}, got {given}")
    key, settings = next(iter(value.items()))
    if isinstance(settings, dict):
        return {"kind": key, **settings}
    return {"kind": key, SHORTHAND_FIELDS[key]: settings}


class BrowserOptions(_Strict):
    """How a browser source's pages are rendered (docs/sources.md, "The browser section")."""

    wait_for: WaitFor | None = Field(
        default=None,
        description="When a page is ready: {css|xpath: ..., state: visible|attached}, network_idle, or "
                    "{delay_ms: N}. Unset: a detail page when every required attribute's selector matches, a "
                    "listing page when a link selector matches (at load when there is nothing to wait for).")
    wait_timeout: float = Field(
        default=10.0, gt=0, le=120,
        description="Seconds a page may take to be ready after its actions; one that is not is a failed render "
                    "(rendered again by the slot's failure rules, then rejected naming what it waited for).")
    actions: list[Action] = Field(
        default_factory=list, max_length=20,
        description="Run in order after load, before the readiness wait: scroll, click (load more), dismiss, "
                    "wait; each bounded in count and time.")
    isolation: Literal["visit", "task"] = Field(
        default="visit",
        description="A fresh browser context (cookies, storage, cache) for each visit of this source to a slot "
                    "(its tasks in a row), or for every task. Never shared between sources.")
    websockets: Literal["refuse", "allow"] = Field(
        default="refuse", description="allow: the page's WebSockets may connect, checked by the address guard.")

    @field_validator("wait_for", mode="before")
    @classmethod
    def _wait_for(cls, value: Any) -> Any:
        return _wait_kind(value)

    @field_validator("actions", mode="before")
    @classmethod
    def _actions(cls, value: Any) -> Any:
        return [_action_kind(item) for item in value] if isinstance(value, list) else value
