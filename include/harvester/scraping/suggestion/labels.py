"""Fields a page says in its markup rather than its data: "Label: value" structures (``dl/dt/dd``, two-column
``th/td`` rows, ``li`` and other short elements reading "SKU: 1234") matched by label in many languages, and
the page's prominent elements (its ``h1``, the price beside it, the add-to-cart control that says the product
can be bought).

Every selector is tied to what the site's template writes on each of its pages (the label's words, a class,
an id without digits), never to one page's values, ids or position in a list, so it holds on the site's other
pages.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from parsel import Selector

from harvester.scraping.suggestion.choices import Choice
from harvester.scraping.suggestion.markup import generated_class
from harvester.scraping.suggestion.schemas import TargetField

LABEL_MAX = 48
# Marks shops put around a label: colons (full-width too), directional marks, bullets and non-breaking spaces.
_LABEL_TRIM = "\u200e\u200f\u200b\u00a0:\uff1a#•·-\u2013 \t\n"
_LABEL_ELEMENTS = "//th | //dt | //td | //span | //b | //strong | //label | //div | //p | //li | //h3 | //h4"
# An identifier: one token of letters and digits (dashes, dots, slashes inside), with a digit.
_IDENTIFIER = re.compile(r"^(?=[\w./-]*\d)[\w][\w./-]{2,39}$")


def xpath_literal(text: str) -> str:
    """A string literal for XPath 1.0, which has no escapes: quoted with what the text lacks, else concat()."""
    if "'" not in text:
        return f"'{text}'"
    if '"' not in text:
        return f'"{text}"'
    return "concat(" + ", \"'\", ".join(f"'{part}'" for part in text.split("'")) + ")"


def label_key(text: str) -> str:
    return " ".join(text.strip(_LABEL_TRIM).lower().split())


def _own_text(node: Selector) -> str:
    return " ".join("".join(node.xpath("./text()").getall()).split())


def label_candidates(document: Selector, target: TargetField) -> Iterator[Choice]:
    """Choices for a field from the page's label-value structures whose label means that field."""
    if not target.labels:
        return
    labels = set(target.labels)
    seen: set[str] = set()
    for node in document.xpath(_LABEL_ELEMENTS):
        whole = " ".join((node.xpath("string()").get() or "").split())
        if not whole or len(whole) > LABEL_MAX + 80:
            continue
        for choice in _label_choices(node, whole, labels, target):
            expression = choice.spec.get("xpath", "")
            if expression not in seen:
                seen.add(expression)
                yield choice


def _label_choices(node: Selector, whole: str, labels: set[str], target: TargetField) -> Iterator[Choice]:
    tag = node.root.tag
    if not isinstance(tag, str):
        return
    if len(whole) <= LABEL_MAX and label_key(whole) in labels and not node.xpath("./*[normalize-space()]"):
        literal = xpath_literal(whole)
        sibling = node.xpath("following-sibling::*[1]")
        if sibling and (sibling[0].xpath("string()").get() or "").strip():
            following = sibling[0].root.tag
            yield _choice(target, f"//{tag}[normalize-space()={literal}]/following-sibling::{following}[1]",
                          f"the value beside the label {whole!r} ({tag} then {following})")
        elif node.xpath("following-sibling::text()[normalize-space()]") and (parent := node.xpath(".."))[0:1]:
            parent_tag = parent[0].root.tag
            yield _choice(target, f"//{parent_tag}[{tag}[normalize-space()={literal}]]",
                          f"the text after the label {whole!r} in its {parent_tag}", _after_label(whole))
        return
    own = _own_text(node)
    label, separator, value = own.partition(":")
    if separator and value.strip() and label_key(label) in labels and not node.xpath("./*"):
        prefix = xpath_literal(label + separator)
        yield _choice(target, f"//{tag}[starts-with(normalize-space(), {prefix})]",
                      f"the {tag} reading {label + separator!r} and its value", _after_label(label + separator))


def _after_label(label: str) -> str:
    """RE2: what follows the label (its marks skipped) to the end of the element's text."""
    return rf"^\s*{re.escape(label.strip())}[\s{re.escape(_LABEL_TRIM)}]*(\S.*?)\s*$"


def _choice(target: TargetField, xpath: str, why: str, regex: str | None = None) -> Choice:
    spec = {"xpath": xpath, **({"type": target.type} if target.type != "str" else {}),
            **({"regex": regex} if regex else {})}
    return Choice(target.name, spec, f"{why}: {target.why}")


def identifier_shaped(value: str) -> bool:
    return _IDENTIFIER.match(value.strip()) is not None


# Words for "price" in class names and ids, and the marks of a price that is not the one a buyer pays.
_PRICE_HOOK = re.compile(r"price|preis|prix|prezzo|precio|preco|prijs|pris|cena|hinta|fiyat|amount|cost", re.I)
_NOT_THE_PRICE = re.compile(r"old|was|strike|before|regular|list|compare|original|crossed|unit|per|save|saving|"
                            r"discount|rrp|uvp|msrp|instead|from|range|shipping|delivery|tax|vat|installment|"
                            r"monthly|points|label|currency|symbol|fraction|whole|decimal|cents|count|coupon", re.I)
STRUCK = "ancestor-or-self::*[self::del or self::s or self::strike]"
# Words a shop's template gives the price a buyer pays now when it differs from the regular one (a sale, a deal).
SALE_PRICE = re.compile(r"sale|current|special|actual|now|final|promo|offer|deal|reduced|selling|discounted", re.I)
# Widgets that show other products' prices beside the product: carousels, recommendations, "also bought".
_OTHER_PRODUCTS = re.compile(r"carousel|recommend|related|similar|upsell|cross|sponsor|slider|swiper|viewed|bought|"
                             r"suggest|accessor|bundle|compare|teaser", re.I)


# A class that says a widget is absent ("no-slider", "without-related"): the block is the product's own.
_NEGATED = re.compile(r"(?:no|non|not|without)[-_]", re.I)


def among_other_products(node: Selector) -> bool:
    """Whether the element sits in a widget of other products: an ancestor named so (a carousel, "related") that
    holds more than one price to pay. A widget name alone is not enough: a product's own picture slider or
    gallery holds its price too, and holds only that one; and a class naming the widget's absence ("no-slider")
    names no widget."""
    for ancestor in node.xpath("ancestor::*[@class or @id]"):
        names = f"{ancestor.attrib.get('class', '')} {ancestor.attrib.get('id', '')}".split()
        if _OTHER_PRODUCTS.search(" ".join(name for name in names if not _NEGATED.match(name))):
            inner = ancestor.xpath(".//*[@class or @id]")[:400]
            prices = [each for each in inner if _price_element(each) and not each.xpath(STRUCK)]
            if sum(not any(_price_element(part) for part in each.xpath(".//*[@class or @id]")) for each in prices) > 1:
                return True  # more than one price of its own (a block around one price is not a second one)
    return False


_AMOUNT = re.compile(r"\d(?:[\d\s.,'\u00a0\u202f]*\d)?")


def several_amounts(text: str) -> bool:
    """Whether a text writes two amounts or more outside parentheses ("49 890 тг. 44 890 тг.", a price and its
    bonus points): a block of an old and a new price, not the price. A unit price in parentheses is the price's
    own note ("8,71 € (4,36 € / 100 ml)")."""
    return len(_AMOUNT.findall(re.sub(r"\([^)]*\)", " ", text))) > 1


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def title_heading(document: Selector) -> Selector | None:
    """The heading that says the product's name: of the ``h1`` (else ``h2``) whose words are mostly in the page's
    ``<title>`` or ``og:title``, the one sharing the most words with it (a review's two-word heading shares fewer
    than the name), since a page may open with other headings (a category's, a pop-up's, a recommended
    product's); else the first ``h1``."""
    named = _words(" ".join(document.xpath("//title/text() | //meta[@property='og:title']/@content").getall()))
    for level in ("h1", "h2"):
        best, best_shared = None, 0
        for heading in document.xpath(f"//{level}")[:60]:
            words = _words(heading.xpath("string()").get() or "")
            shared = len(words & named)
            if words and shared / len(words) >= 0.6 and shared > best_shared:
                best, best_shared = heading, shared
        if best is not None:
            return best
    first = document.xpath("//h1")
    return first[0] if first else None


def _class_hook(node: Selector) -> tuple[str, str] | None:
    """The CSS of an element by its id (no digits: not one page's) or its first named class, and the words."""
    tag = node.root.tag if isinstance(node.root.tag, str) else None
    if tag is None:
        return None
    element_id = node.attrib.get("id") or ""
    if element_id and not re.search(r"\d", element_id) and re.fullmatch(r"[A-Za-z][\w-]*", element_id):
        return f"{tag}#{element_id}", element_id
    classes = [name for name in (node.attrib.get("class") or "").split()
               if re.fullmatch(r"[A-Za-z_-][\w-]*", name) and not generated_class(name)]
    hooked = [name for name in classes if _PRICE_HOOK.search(name)] or classes
    return (f"{tag}.{hooked[0]}", " ".join(classes)) if hooked else None


def _price_element(node: Selector) -> bool:
    """Whether an element's class or id says it is a price, and not an old, unit or part-of-a-price one."""
    hook = _class_hook(node)
    return hook is not None and bool(_PRICE_HOOK.search(hook[1])) and not _NOT_THE_PRICE.search(hook[1])


def prominent_price(document: Selector, target: TargetField) -> Iterator[Choice]:
    """The price beside the title: the first element after the ``h1`` whose class or id says price and whose
    text reads as an amount, that is not struck through nor a unit, old or instalment price, and holds no such
    element itself (a block with the old and the new price is not the price; the new one inside it is). Its selector
    must find that very element first on the page (scoped by an ancestor when its class alone finds another)."""
    heading = title_heading(document)
    after_title = (heading.xpath("following::*[@class or @id]") if heading is not None else []) \
        or document.xpath("//body//*[@class or @id]")
    for node in after_title[:4000]:
        hook = _class_hook(node)
        if hook is None or not _price_element(node):
            continue
        text = " ".join((node.xpath("string()").get() or "").split())
        if not (0 < len(text) <= 40 and re.search(r"\d", text)) or several_amounts(text) or node.xpath(STRUCK) \
                or among_other_products(node):
            continue
        if any(_price_element(inner) for inner in node.xpath(".//*[@class or @id]")):
            continue  # a block holding an old and a new price: the price is the element inside, next in the loop
        css = scoped_first(document, node, hook[0])
        if css is None:
            continue
        sale = SALE_PRICE.search(hook[1])
        yield Choice(target.name, {"css": css, "type": "price"},
                     f"{css}: the first price after the page's title that is not struck through nor a unit or old "
                     f"price{', marked as the price to pay now' if sale else ''}: {target.why}", shown_sale=bool(sale))
        return


SCOPE_DEPTH = 8


def scoped_first(document: Selector, node: Selector, css: str) -> str | None:
    """A selector that finds this very element first: its own, else its own under the nearest ancestor's (an id
    without digits or a named class), for a class the template also gives the prices in its menus and carousels
    before the product's part of the page (``div.pricing span.actual-price``); None: no such selector."""
    for scope in (None, *node.xpath("ancestor::*[@class or @id]")[::-1][:SCOPE_DEPTH]):
        hook = _class_hook(scope) if scope is not None else None
        if scope is not None and hook is None:
            continue
        scoped = css if hook is None else f"{hook[0]} {css}"
        first = document.css(scoped)
        if first and first[0].root is node.root:
            return scoped
    return None


_ADD_TO_CART = re.compile(
    r"add to (?:cart|basket|bag|trolley)|buy now|buy it now|in den (?:warenkorb|einkaufswagen)|jetzt kaufen|"
    r"ajouter au panier|acheter|aggiungi al carrello|acquista|añadir al carrito|agregar al carrito|comprar|"
    r"in winkelwagen|toevoegen aan winkelwagen|lägg i varukorgen|læg i kurv|legg i handlekurven|lisää ostoskoriin|"
    r"do koszyka|dodaj do koszyka|do košíku|kosárba|sepete ekle|в корзину|купить|カートに入れる|加入购物车|장바구니",
    re.I)


# What a shop writes on a product page that cannot be bought now, in the languages shops write in: whole phrases
# (an "Image unavailable" caption is not about the product).
OUT_OF_STOCK_PHRASES = (
    "out of stock", "sold out", "currently unavailable", "temporarily unavailable", "no longer available",
    "not in stock", "not available for purchase", "ausverkauft", "derzeit nicht verfügbar", "nicht lieferbar",
    "nicht mehr verfügbar", "épuisé", "rupture de stock", "actuellement indisponible", "plus disponible",
    "esaurito", "attualmente non disponibile", "momentaneamente non disponibile", "agotado", "sin stock",
    "no disponible temporalmente", "esgotado",
    "uitverkocht", "niet op voorraad", "niet leverbaar", "slutsåld", "udsolgt", "utsolgt", "loppuunmyyty",
    "wyprzedane", "brak w magazynie", "vyprodáno", "není skladem", "нет в наличии", "распродано", "売り切れ",
    "在庫切れ", "缺货", "售罄", "품절", "tükendi", "stokta yok",
)
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÜÉÈÀÍÓÚÑ"
_LOWER = "abcdefghijklmnopqrstuvwxyzäöüéèàíóúñ"
OUT_OF_STOCK_TEXT = (
    "//body//text()[not(ancestor::script or ancestor::style or ancestor::noscript or ancestor::template "
    "or ancestor::option or ancestor::a)][string-length(normalize-space()) < 60][" + " or ".join(
        f"contains(translate(., '{_UPPER}', '{_LOWER}'), '{phrase}')" for phrase in OUT_OF_STOCK_PHRASES) + "]")


def _cart_hook(node: Selector) -> str | None:
    """XPath of the add-to-cart control by its id, name, test id or class: what the template writes on every
    product page (a value with a run of digits is one product's, and is not used)."""
    tag = node.root.tag
    for attribute in ("id", "name", "data-testid", "data-test"):
        value = node.attrib.get(attribute) or ""
        if value and not re.search(r"\d{3,}", value) and "'" not in value:
            return f"//{tag}[@{attribute}='{value}']"
    hook = _class_hook(node)
    if hook is not None and "." in hook[0]:
        return f"//{tag}[contains(concat(' ', normalize-space(@class), ' '), ' {hook[0].split('.', 1)[1]} ')]"
    return None


def add_to_cart_control(document: Selector) -> tuple[str, str] | None:
    """The page's add-to-cart control (XPath, what it reads), when it has one that is not disabled."""
    for node in document.xpath("//button | //input[@type='submit' or @type='button'] | //a[@role='button']"):
        text = " ".join((node.xpath("string()").get() or node.attrib.get("value") or "").split())
        if not (_ADD_TO_CART.search(text) or _ADD_TO_CART.search(node.attrib.get("value") or "")):
            continue
        if node.xpath("ancestor-or-self::*[@disabled or @aria-disabled='true']"):
            continue
        if (hook := _cart_hook(node)) is not None:
            return hook, text[:40]
    return None


def add_to_cart(document: Selector, target: TargetField) -> Iterator[Choice]:
    """In stock while the page has its add-to-cart control and says nowhere that the product is out of stock
    (sold out, currently unavailable... in many languages); without a control, while it says nowhere so."""
    control = add_to_cart_control(document)
    if control is not None:
        yield Choice(target.name, {"xpath": f"boolean({control[0]}) and not({OUT_OF_STOCK_TEXT})", "type": "bool"},
                     f"the add-to-cart control ({control[1]!r}) is on the page and no text says the product is out "
                     "of stock: in stock")
    yield Choice(target.name, {"xpath": f"not({OUT_OF_STOCK_TEXT})", "type": "bool"},
                 "no text on the page says the product is out of stock (sold out, currently unavailable, in many "
                 "languages): in stock while none does")
