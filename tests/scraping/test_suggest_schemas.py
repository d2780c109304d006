"""`harvester suggest --schema`: fields named as schema.org names them, each read from the most trusted place the
page says it (JSON-LD, microdata, meta, itemprop, label rows, the prominent elements), held on sampled pages,
and never site chrome. Pages are parsed here as the command parses them; the command's own paths (fetching,
--html, --sample, --listing) run against a real loopback server (tests.fixtures.hostile_hosts)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from harvester.cli import main
from harvester.config import SourceConfig
from harvester.scraping.extraction import DataBounds, PageData, extract_record
from harvester.scraping.suggestion.choices import Choice
from harvester.scraping.suggestion.labels import xpath_literal
from harvester.scraping.suggestion.markup import chrome_name, css_choices
from harvester.scraping.suggestion.schemas import JOB_POSTING, PRODUCT
from harvester.scraping.suggestion.targeted import detect_schema, first_sound
from parsel import Selector

URL = "https://shop.example/p/widget-4711.html"


def page(body: str, head: str = "", url: str = URL) -> PageData:
    return PageData(f"<html><head>{head}</head><body>{body}</body></html>", url, "html", DataBounds())


def ld(data: dict[str, Any]) -> str:
    return f'<script type="application/ld+json">{json.dumps({"@context": "https://schema.org", **data})}</script>'


def suggested(*pages: PageData) -> tuple[dict[str, Choice], list[dict[str, Any]], list[str]]:
    """The product fields chosen over ``pages``, and the record each page gives with them."""
    chosen, notes = first_sound(list(pages), PRODUCT)
    source = SourceConfig.model_validate({"name": "probe", "input": {"seeds": [pages[0].url]},
                                         "attributes": {choice.name: choice.spec for choice in chosen}})
    records = [extract_record(source, each, each.url).record for each in pages]
    return {choice.name: choice for choice in chosen}, records, notes


def kind_of(choice: Choice) -> str:
    return next(key for key in ("jsonld", "microdata", "meta", "css", "xpath") if key in choice.spec)


@pytest.mark.unit
def test_json_ld_gives_every_product_field_typed() -> None:
    head = ld({"@type": "Product", "name": "Widget", "sku": "W-4711", "gtin13": "4006381333931",
               "brand": {"@type": "Brand", "name": "Acme"}, "image": ["https://shop.example/w.jpg"],
               "offers": {"@type": "Offer", "price": "19.90", "priceCurrency": "EUR",
                          "availability": "https://schema.org/InStock"}})
    choices, [record], _ = suggested(page("<h1>Something else</h1>", head))
    assert {name: kind_of(choice) for name, choice in choices.items()} == {
        "name": "jsonld", "price": "jsonld", "currency": "jsonld", "sku": "jsonld", "brand": "jsonld",
        "availability": "jsonld", "gtin": "jsonld", "image": "jsonld"}
    assert record["price"] == {"amount": Decimal("19.9"), "currency": "EUR"}
    assert (record["name"], record["sku"], record["brand"], record["availability"]) == ("Widget", "W-4711", "Acme",
                                                                                         True)


@pytest.mark.unit
def test_a_product_in_stock_in_any_size_is_in_stock() -> None:
    offers = [{"@type": "Offer", "price": "30", "priceCurrency": "EUR", "availability": "https://schema.org/OutOfStock"},
              {"@type": "Offer", "price": "30", "priceCurrency": "EUR", "availability": "https://schema.org/InStock"}]
    _, [record], _ = suggested(page("<h1>Boots</h1>", ld({"@type": "Product", "name": "Boots", "offers": offers})))
    assert record["availability"] is True
    sold_out = [{**offer, "availability": "https://schema.org/SoldOut"} for offer in offers]
    _, [record], _ = suggested(page("<h1>Boots</h1>", ld({"@type": "Product", "name": "Boots", "offers": sold_out})))
    assert record["availability"] is False


@pytest.mark.unit
def test_microdata_then_meta_then_itemprop_when_the_more_trusted_place_says_nothing() -> None:
    head = (ld({"@type": "Product", "name": "Lamp", "offers": {"@type": "Offer", "price": "", "priceCurrency": "GBP"}})
            + '<meta property="product:price:amount" content="42.50">'
              '<meta property="product:price:currency" content="GBP">')
    body = '<h1>Lamp</h1><span itemprop="sku">LMP-220</span>'
    choices, [record], _ = suggested(page(body, head))
    assert kind_of(choices["price"]) == "meta" and "gave no sound value" in choices["price"].why
    assert record["price"] == {"amount": Decimal("42.5"), "currency": "GBP"}
    assert choices["sku"].spec == {"css": "[itemprop=sku]"} and record["sku"] == "LMP-220"
    microdata = ('<div itemscope itemtype="https://schema.org/Product"><h1 itemprop="name">Chair</h1>'
                 '<span itemprop="sku">CH-9</span><div itemprop="offers" itemscope itemtype="https://schema.org/Offer">'
                 '<meta itemprop="price" content="12.00"><meta itemprop="priceCurrency" content="USD"></div></div>')
    choices, [record], _ = suggested(page(microdata))
    assert kind_of(choices["sku"]) == "microdata" and record["sku"] == "CH-9"
    assert record["price"] == {"amount": Decimal("12"), "currency": "USD"}


@pytest.mark.unit
def test_label_rows_of_a_shop_without_structured_data_in_three_languages() -> None:
    book = ("<h1>The Book</h1><ul><li>ISBN-13: 9780306406157</li><li>Publisher: Plenum</li></ul>"
            '<span class="our-price">£12.99</span>')
    choices, [record], _ = suggested(page(book))
    assert record["gtin"] == "9780306406157" and "ISBN-13:" in choices["gtin"].spec["xpath"]
    assert record["price"] == {"amount": Decimal("12.99"), "currency": "GBP"}
    german = "<h1>Tisch</h1><dl><dt>Marke</dt><dd>Holzwerk</dd><dt>Artikelnummer</dt><dd>T-55-EI</dd></dl>"
    _, [record], _ = suggested(page(german))
    assert (record["brand"], record["sku"]) == ("Holzwerk", "T-55-EI")
    french = "<h1>Table</h1><table><tr><th>Référence</th><td>TB-88-CH</td></tr></table>"
    choices, [record], _ = suggested(page(french))
    assert choices["sku"].spec["xpath"].startswith("//th[normalize-space()=") and "TB-88-CH" not in str(choices)


@pytest.mark.unit
def test_the_identifier_the_address_uses_is_found_under_a_label_in_any_language() -> None:
    body = "<h1>Widget</h1><table><tr><td>Šifra izdelka</td><td>4711</td></tr></table><p>9 reviews</p>"
    choices, [record], _ = suggested(page(body))
    assert record["sku"] == "4711"
    assert "4711" not in choices["sku"].spec["xpath"]  # the label, never the value
    other = page(body.replace("4711", "5230"), url="https://shop.example/p/gadget-5230.html")
    _, [_, record], _ = suggested(page(body), other)
    assert record["sku"] == "5230"


@pytest.mark.unit
@pytest.mark.parametrize("canonical, sku, other, other_sku", [
    ("https://shop.example/garden/hose-reel-green-20m--88412.html", "88412",
     "https://shop.example/kitchen/kettle-1-7l-steel-90077.html", "90077"),
    ("https://shop.example/store/51?pid=260591", "260591", "https://shop.example/store/7?pid=31337", "31337"),
    ("https://shop.example/P-7142014-chair-cover-cotton", "7142014",
     "https://shop.example/P-5550123-table-cloth", "5550123"),
])
def test_the_identifier_in_the_canonical_address_when_the_page_shows_none(
        canonical: str, sku: str, other: str, other_sku: str) -> None:
    body = "<h1>Hose reel</h1><p>A sturdy reel for 20 m of hose.</p>"
    first = page(body, f"<link rel='canonical' href='{canonical}'>", url="https://mirror.example/a")
    choices, [record], _ = suggested(first)
    assert record["sku"] == sku
    assert sku not in json.dumps(choices["sku"].spec)  # where the number sits in the address, never the number
    second = page(body, f"<meta property='og:url' content='{other}'><link rel='canonical' href='{other}'>",
                  url="https://mirror.example/b")
    _, [_, record], _ = suggested(first, second)
    assert record["sku"] == other_sku


@pytest.mark.unit
def test_an_identifier_the_page_shows_beats_the_one_in_its_address() -> None:
    head = "<link rel='canonical' href='https://shop.example/p/widget-4711.html'>"
    choices, [record], _ = suggested(page("<h1>Widget</h1><dl><dt>SKU</dt><dd>AC-20931</dd></dl>", head))
    assert record["sku"] == "AC-20931"
    assert "canonical" not in json.dumps(choices["sku"].spec)
    _, [record], _ = suggested(page("<h1>Widget</h1>", "<link rel='canonical' href='https://shop.example/2020/'>"))
    assert "sku" not in record or record["sku"] is None  # a year is no identifier


@pytest.mark.unit
def test_a_reference_the_page_shows_beats_a_structured_sku_it_writes_nowhere() -> None:
    def shop_page(variant: str, code: str, shown_variant: bool = False) -> PageData:
        head = ld({"@type": "Product", "name": "Kettle", "sku": variant,
                   "offers": {"@type": "Offer", "price": "30.00", "priceCurrency": "EUR"}})
        extra = f"<p>Variant {variant}</p>" if shown_variant else ""
        return page(f"<h1>Kettle</h1><p class='code'>Product code: {code}</p>{extra}", head)

    choices, [record], _ = suggested(shop_page("10134622", "141677"))
    assert record["sku"] == "141677" and "141677" not in json.dumps(choices["sku"].spec)
    choices, [record], _ = suggested(shop_page("10134622", "141677", shown_variant=True))
    assert kind_of(choices["sku"]) == "jsonld" and record["sku"] == "10134622"  # shown too: the markup stays
    _, records, _ = suggested(shop_page("10134622", "141677"), shop_page("20250001", "300912"))
    assert [each["sku"] for each in records] == ["141677", "300912"]


@pytest.mark.unit
def test_an_itemprop_identifier_as_the_page_writes_it_over_its_machine_form() -> None:
    body = "<h1>Camera</h1><span itemprop='sku' content='4667999' class='cat-number'>466/7999</span>"
    _, [record], _ = suggested(page(body))
    assert record["sku"] == "466/7999"
    _, [record], _ = suggested(page(body.replace("466/7999", "Camera 4667999")))
    assert record["sku"] == "4667999"  # the content is written in the text: it stays


@pytest.mark.unit
def test_the_address_identifier_written_in_groups_is_found_by_the_elements_name() -> None:
    head = ld({"@type": "Product", "name": "Boots", "sku": "84518927-040-35"})
    body = ("<h1>Boots</h1><p><span class='colour'>Black</span> - "
            "<span data-qualifier='product-reference'>1002/710</span></p>")
    url = "https://shop.example/en/flat-boots-p11002710.html"
    choices, [record], _ = suggested(page(body, head, url=url))
    assert record["sku"] == "1002/710"
    assert choices["sku"].spec == {"xpath": "//span[@data-qualifier='product-reference']"}  # not beside "Black"
    other = page(body.replace("Black", "Red").replace("1002/710", "3697/272"), head,
                 url="https://shop.example/en/dress-p03697272.html")
    _, [_, record], _ = suggested(page(body, head, url=url), other)
    assert record["sku"] == "3697/272"
    dotted = page("<h1>Table</h1><span id='item-number'>002.937.72</span>",
                  url="https://shop.example/p/table-oak-00293772/")
    _, [record], _ = suggested(dotted)
    assert record["sku"] == "002.937.72"


@pytest.mark.unit
def test_the_price_beside_the_title_not_the_old_unit_or_other_products_price() -> None:
    body = ("<div class='crumbs'><span class='price'>1.00 €</span></div><h1>Coffee</h1>"
            "<del><span class='price-old'>9,99 €</span></del><span class='price-unit'>(3,99 € / kg)</span>"
            "<span class='product-price'>7,49 €</span>"
            "<div class='carousel'><span class='tile-price'>2,00 €</span></div>")
    choices, [record], _ = suggested(page(body))
    assert choices["price"].spec == {"css": "span.product-price", "type": "price"}
    assert record["price"] == {"amount": Decimal("7.49"), "currency": "EUR"}


@pytest.mark.unit
def test_the_price_after_the_heading_that_names_the_product_not_after_a_pop_ups() -> None:
    head = "<title>Citrus body lotion 200 ml: Shop</title>"
    body = ("<div class='subscribe-popover'><h1>Save 15%</h1><span id='subscription-price'>8,27 €</span></div>"
            "<h1 id='title'>Citrus body lotion 200 ml, Weleda</h1><span id='buybox-price'>8,71 €</span>")
    choices, [record], _ = suggested(page(body, head))
    assert choices["price"].spec == {"css": "span#buybox-price", "type": "price"}
    assert record["price"]["amount"] == Decimal("8.71")
    heading_two = ("<div class='tile'><h1>Other book</h1><span class='tile-price'>7500</span></div>"
                   "<h2 class='deal-title'>Citrus body lotion 200 ml</h2><p class='deal-price'>30,000 ₩</p>")
    _, [record], _ = suggested(page(heading_two, head))
    assert record["price"]["amount"] == Decimal("30000")
    reviewed = body + "<div class='reviews'><h1>Body lotion</h1><span class='review-price'>5,00 €</span></div>"
    _, [record], _ = suggested(page(reviewed, head))  # a review's heading shares fewer words with the title
    assert record["price"]["amount"] == Decimal("8.71")
    _, [record], _ = suggested(page(body, "<title>Shop</title>"))  # no heading names it: the first h1, as before
    assert record["price"]["amount"] == Decimal("8.27")


@pytest.mark.unit
def test_a_products_own_slider_holds_its_price_a_carousel_of_others_does_not() -> None:
    body = ("<h1>Insoles</h1><div class='gallery-slider'><img src='a.jpg'><div class='slider-price'>"
            "<span class='slider-price-new'>270,00 Kn</span><span class='slider-price-old'>540,00 Kn</span></div></div>"
            "<div class='related-slider'><span class='item-price'>169,00 Kn</span>"
            "<span class='item-price'>1.200,00 Kn</span></div>")
    choices, [record], _ = suggested(page(body))
    assert choices["price"].spec == {"css": "span.slider-price-new", "type": "price"}
    assert record["price"]["amount"] == Decimal("270.00")
    carousel = ("<h1>Insoles</h1><div class='related-slider'><span class='item-price'>169,00 Kn</span>"
                "<span class='item-price'>1.200,00 Kn</span></div><span class='product-price'>270,00 Kn</span>")
    _, [record], _ = suggested(page(carousel))
    assert record["price"]["amount"] == Decimal("270.00")


@pytest.mark.unit
def test_an_element_writing_two_amounts_is_a_block_not_the_price() -> None:
    body = ("<h1>Phone</h1><div class='e-price'>49 890 тг. 44 890 тг. + 448 bonus</div>"
            "<div class='buy-prices'>44 890 тг.</div>")
    choices, [record], _ = suggested(page(body))
    assert choices["price"].spec == {"css": "div.buy-prices", "type": "price"}
    assert record["price"]["amount"] == Decimal("44890")
    _, [record], _ = suggested(page("<h1>Lotion</h1><span class='our-price'>8,71 € (4,36 € / 100 ml)</span>"))
    assert record["price"]["amount"] == Decimal("8.71")  # a unit price in parentheses is the price's note


@pytest.mark.unit
def test_the_sale_price_shown_by_the_title_beats_the_regular_price_in_the_markup() -> None:
    def shop_page(regular: str, shown: str) -> PageData:
        head = ld({"@type": "Product", "name": "Lamp",
                   "offers": {"@type": "Offer", "price": regular, "priceCurrency": "EUR"}})
        return page(f"<h1>Lamp</h1><s class='price-was'>{regular} €</s>"
                    f"<span class='price-now'>{shown.replace('.', ',')} €</span>", head)

    choices, [record], _ = suggested(shop_page("49.90", "39.90"))
    assert choices["price"].spec == {"css": "span.price-now", "type": "price"}
    assert record["price"]["amount"] == Decimal("39.90")
    choices, [record], _ = suggested(shop_page("49.90", "49.90"))  # no sale: the markup stays the more trusted
    assert kind_of(choices["price"]) == "jsonld" and record["price"]["amount"] == Decimal("49.90")
    choices, _, _ = suggested(shop_page("480.00", "40.00"))  # a twelfth: an instalment, not a sale
    assert kind_of(choices["price"]) == "jsonld"
    choices, records, _ = suggested(shop_page("49.90", "39.90"), shop_page("19.90", "19.90"))
    assert kind_of(choices["price"]) == "jsonld"  # the sale must hold on every sampled page
    assert [each["price"]["amount"] for each in records] == [Decimal("49.90"), Decimal("19.90")]


@pytest.mark.unit
def test_a_block_holding_the_old_and_the_new_price_is_not_the_price() -> None:
    head = ld({"@type": "Product", "name": "Chair", "offers": {"@type": "Offer", "price": "120.00",
                                                               "priceCurrency": "USD"}})
    body = ("<h1>Chair</h1><div class='price-box'><span class='price-original'>$120.00</span>"
            "<span class='price-current'>$84.00</span></div>")
    choices, [record], _ = suggested(page(body, head))
    assert choices["price"].spec == {"css": "span.price-current", "type": "price"}
    assert record["price"]["amount"] == Decimal("84.00")


@pytest.mark.unit
def test_the_amount_in_the_largest_type_is_the_price_where_no_class_says_price() -> None:
    inline = ("<h1>Goose floss 250 g</h1><table><tr><td class='t13'><b>List price</b> <del>$420</del> 元</td></tr>"
              "<tr><td class='t13'><b>Special</b> <font color='red'>7</font> off "
              "<span style='font:bold 27px Verdana;color:#ff0000'>294</span> 元</td></tr>"
              "<tr><td>3 instalments of <span style='font-size:13px'>98</span></td></tr></table>")
    choices, [record], _ = suggested(page(inline))
    assert choices["price"].spec == {"xpath": "//span[@style='font:bold 27px Verdana;color:#ff0000']",
                                     "type": "price"}
    assert record["price"]["amount"] == Decimal("294")
    ruled = ("<h1>Jerky, ten packs</h1><div class='item'><p class='deal'>Now <span>99</span> each</p>"
             "<p class='was'>Was <span>120</span></p></div>")
    style = "<style>.item .deal span{color:red;font-size:45px} .item .was span{font-size:12px}</style>"
    choices, [record], _ = suggested(page(ruled, style))
    assert choices["price"].spec == {"css": ".item .deal span", "type": "price"}
    assert record["price"]["amount"] == Decimal("99")
    for unsure in (ruled.replace("font-size:12px", "font-size:45px"),  # two amounts in the same large type
                   ruled):  # no style sheet: nothing stands out
        _, [record], notes = suggested(page(unsure, style.replace("12px", "45px") if unsure != ruled else ""))
        assert "price" not in record and any(note.startswith("price") for note in notes)
    cents = "<h1>Kettle</h1><p style='font-size:30px'>173<sup>34</sup> Lei</p>"  # written in two parts
    _, [record], _ = suggested(page(cents))
    assert "price" not in record


@pytest.mark.unit
def test_a_price_class_the_menu_uses_first_is_scoped_by_the_products_block() -> None:
    menu = ("<nav><div class='menu-slider'><h3>Best sellers</h3><span class='actual-price'>20,90 €</span>"
            "<span class='actual-price'>17,57 €</span></div></nav>")
    head = ld({"@type": "Product", "name": "Fairy Oak", "offers": {"@type": "Offer", "price": "18.00",
                                                                   "priceCurrency": "EUR"}})
    body = (f"{menu}<h1>Fairy Oak</h1><div class='col-right no-slider'><div class='pricing'>"
            "<span class='actual-price'>17,10 €</span><span class='barred'>18,00 €</span></div>"
            "<p>Also as an e-book: <span class='ebook-price'>9,99 €</span></p></div>")  # two prices, no slider
    choices, [record], _ = suggested(page(body, head))
    assert choices["price"].spec == {"css": "div.pricing span.actual-price", "type": "price"}
    assert record["price"]["amount"] == Decimal("17.10")  # shown as the price to pay now, below the markup's


@pytest.mark.unit
def test_a_count_or_a_coupon_beside_the_price_is_not_the_price() -> None:
    body = ("<h2>Magazine, one year</h2><p class='deal-price-sell'><strong>30,000 ₩</strong>"
            "<span class='deal-price-buy-count'>29 bought</span><span class='coupon-price'>5% coupon</span></p>"
            "<span class='deal-price'>30,000 ₩</span>")
    choices, [record], _ = suggested(page(body))
    assert choices["price"].spec == {"css": "span.deal-price", "type": "price"}
    assert record["price"]["amount"] == Decimal("30000")


@pytest.mark.unit
@pytest.mark.parametrize("body, in_stock", [
    ("<h1>Kettle</h1><button id='add-to-cart'>Add to basket</button>", True),
    ("<h1>Kettle</h1><p class='stock'>Currently unavailable.</p>", False),
    ("<h1>Kessel</h1><span>Ausverkauft</span><button id='add-to-cart' disabled>In den Warenkorb</button>", False),
    ("<h1>Kettle</h1><figure>Image unavailable</figure><button id='buy'>Buy now</button>", True),
])
def test_availability_from_the_add_to_cart_control_and_the_page_text(body: str, in_stock: bool) -> None:
    choices, [record], _ = suggested(page(body))
    assert record["availability"] is in_stock
    assert kind_of(choices["availability"]) == "xpath"


@pytest.mark.unit
def test_a_selector_is_kept_only_when_it_holds_on_every_sampled_page() -> None:
    first = page("<h1>A</h1><span class='code'>Code: AB-1234</span><p>SKU: AB-1234</p>",
                 url="https://shop.example/item/1")
    second = page("<h1>B</h1><span class='code'>CD-9876</span><p>SKU: CD-9876</p>", url="https://shop.example/item/2")
    choices, records, _ = suggested(first, second)
    assert [record["sku"] for record in records] == ["AB-1234", "CD-9876"]
    assert "held on all 2 sampled pages" in choices["sku"].why
    lone = page("<h1>C</h1><p>Nothing here</p>", url="https://shop.example/item/3")
    choices, _, notes = suggested(first, lone)
    assert "sku" not in choices and any("at best 1 of 2" in note for note in notes)


@pytest.mark.unit
def test_site_chrome_is_never_suggested() -> None:
    body = ("<nav><span class='nav-cart-count'>0</span><span class='logo-label'>Shop</span></nav>"
            "<div class='glow-toaster-title'>Deliver to</div><span class='share-label'>Share</span>"
            "<span class='cookie-text'>We use cookies</span><span class='wishlist-count'>3</span>"
            "<h1>Widget</h1><span class='colour'>Red</span>")
    names = {choice.name for choice in css_choices(Selector(text=f"<html><body>{body}</body></html>"))}
    assert names == {"title", "colour"}
    assert all(chrome_name(name) for name in ("nav_cart_count", "glow-toaster-title", "share-buttons", "cookie_bar"))
    assert not any(chrome_name(name) for name in ("price", "colour", "navy_blue", "searchlight_model"))


@pytest.mark.unit
def test_auto_picks_the_declared_type_else_a_product_when_it_looks_like_one() -> None:
    job = page("<h1>Engineer</h1>", ld({"@type": "JobPosting", "title": "Engineer", "datePosted": "2026-01-05"}))
    assert detect_schema(job) is JOB_POSTING
    shop = page("<h1>Mug</h1><span class='price'>5,00 €</span><button name='add'>Ajouter au panier</button>")
    assert detect_schema(shop) is PRODUCT
    assert detect_schema(page("<h1>About us</h1><p>We are a team.</p>")) is None


@pytest.mark.unit
def test_xpath_literals_hold_quotes_of_both_kinds() -> None:
    for text in ("plain", "numéro d'article", 'say "hi"', "it's \"both\""):
        node = Selector(text=f"<p>{text}</p>").xpath(f"//p[normalize-space()={xpath_literal(text)}]")
        assert node, text


PRODUCT_PAGE = ("<html><body><nav><a class='nav-cart' href='/cart'>Cart (0)</a></nav><h1>Widget {n}</h1>"
                "<table><tr><th>Item number</th><td>WX-{n}00</td></tr></table><span class='price'>{n}9.00 €</span>"
                "<button id='add-to-cart'>Add to cart</button></body></html>")


@pytest.fixture
def shop(site):
    site.route("/shop", text="".join(f"<div class='card'><a class='product-link' href='/item/{n}'>Widget {n}</a></div>"
                                     for n in range(1, 5)), content_type="text/html")
    for n in range(1, 5):
        site.route(f"/item/{n}", text=PRODUCT_PAGE.format(n=n), content_type="text/html")
    return site


@pytest.mark.integration
def test_listing_to_source_end_to_end_with_the_product_schema(shop, tmp_path: Path) -> None:
    path = tmp_path / "shop.yaml"
    assert main(["suggest", f"{shop.url}/shop", "--listing", "--schema", "product", "--name", "shop",
                 "-o", str(path), "--render", "http"]) == 0
    text = path.read_text()
    suggested_source = yaml.safe_load(text)
    assert {"name", "price", "sku", "availability"} <= set(suggested_source["attributes"])
    assert "held on all 3 sampled pages" in text
    assert not any(chrome_name(name) for name in suggested_source["attributes"])
    report = tmp_path / "report.json"
    with report.open("w") as out:
        import contextlib
        with contextlib.redirect_stdout(out):
            assert main(["try", str(path), f"{shop.url}/item/4", "--json"]) == 0
    record = json.loads(report.read_text())["record"]
    assert (record["name"], record["sku"], record["availability"]) == ("Widget 4", "WX-400", True)
    assert record["price"]["amount"] == "49.00" or float(record["price"]["amount"]) == 49.0


@pytest.mark.integration
def test_sample_pages_and_a_saved_page(shop, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "item.html"
    saved.write_text(PRODUCT_PAGE.format(n=7), encoding="utf-8")
    assert main(["suggest", "https://shop.example/item/7", "--html", str(saved), "--schema", "product",
                 "--sample", f"{shop.url}/item/2"]) == 0
    attributes = yaml.safe_load(capsys.readouterr().out)["attributes"]
    assert attributes["sku"]["xpath"] == "//th[normalize-space()='Item number']/following-sibling::td[1]"
    assert main(["suggest", "https://shop.example/item/7", "--html", str(tmp_path / "missing.html")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["suggest", f"{shop.url}/item/1", "--all"]) == 2
    assert main(["suggest", f"{shop.url}/item/1", "--schema", "product", "--sample", f"{shop.url}/gone"]) == 1
    assert "sample" in capsys.readouterr().err


ROOT = Path(__file__).resolve().parents[2]


def bench_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    """bench/suggest.py as a module; it imports its sibling `rig` as a script does, so bench/ goes on the path."""
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("suggest_bench", ROOT / "bench" / "suggest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.unit
def test_the_bench_scores_as_the_benchmark_does(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = bench_module(monkeypatch)
    results = [
        {"truth": {"price": ["87.11"], "sku": ["B1"], "availability": ["InStock"]},
         "predicted": bench.predicted({"price": {"amount": Decimal("87.110"), "currency": "USD"}, "sku": "B1"}),
         "name": "A"},
        {"truth": {"price": ["5"], "sku": ["X9"], "availability": ["OutOfStock"]},
         "predicted": bench.predicted({"price": {"amount": Decimal("6"), "currency": "EUR"}, "availability": False}),
         "name": None},
    ]
    figures = bench.figures(results)
    # price: 1 right, 1 wrong (a false positive and a false negative); sku: 1 right, 1 missing; availability: 2 right
    assert (figures["price_f1"], figures["sku_f1"], figures["availability_f1"]) == (0.5, 0.667, 1.0)
    assert figures["name_share"] == 0.5
    assert results[0]["predicted"]["availability"] == "InStock"  # empty: InStock, as the benchmark fills it
