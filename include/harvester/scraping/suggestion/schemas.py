"""Target schemas: the fields a person means by "a product", "a job posting", "an article" or "an event",
named as schema.org names them, and every place a page may say each one.

A field lists, in the order they are tried: the paths into the page's structured item of that type
(JSON-LD, microdata), the ``<meta>`` names that carry it (OpenGraph and its ``product:`` namespace), the
``itemprop`` names that mark it in the markup, and the words a label in a "Label: value" row uses for it, in
the languages shops write in. The words are the field's, never one site's: a label earns its place by
meaning the field in that language.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TargetField:
    """One field of a target schema and where a page may say it."""

    name: str
    type: str = "str"
    paths: tuple[str, ...] = ()  # JMESPath into the structured item, most specific first
    meta: tuple[str, ...] = ()
    itemprops: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()  # lower-case label words, matched against the whole label (":" stripped)
    why: str = ""


@dataclass(frozen=True)
class TargetSchema:
    """A schema.org type the suggestion names its attributes after."""

    name: str
    types: tuple[str, ...]  # the schema.org @types that declare it
    fields: tuple[TargetField, ...] = field(default_factory=tuple)

    def field(self, name: str) -> TargetField | None:
        return next((target for target in self.fields if target.name == name), None)


_SKU_LABELS = (
    "sku", "sku number", "item number", "item no", "item no.", "item #", "item code", "product code", "product id",
    "product number", "product no", "article number", "article no", "art. no", "art. no.", "style", "style number",
    "style no", "reference", "ref", "ref.", "model number", "item model number", "part number", "catalog number",
    "artikelnummer", "artikel-nr", "artikel-nr.", "art.-nr", "art.-nr.", "art.nr", "artikelnr", "bestellnummer",
    "référence", "réf", "réf.", "numéro d'article", "code article", "référence produit", "codice", "codice articolo",
    "codice prodotto", "cod. articolo", "riferimento", "referencia", "ref. producto", "código", "código de producto",
    "código del producto", "número de artículo", "artikelnummer:", "varenummer", "artikelnr.", "tuotenumero",
    "numer katalogowy",
    "šifra", "šifra artikla", "cod produs", "cod",
    "kod produktu", "kod", "číslo produktu", "kód produktu", "cikkszám", "termékkód",
    "артикул", "код товара", "код", "商品番号", "品番", "型番", "货号", "商品编号", "상품번호", "รหัสสินค้า",
)
_PRICE_LABELS = ("price", "our price", "sale price", "preis", "prix", "prezzo", "precio", "preço", "prijs", "pris",
                 "cena", "hinta", "цена", "価格", "价格", "가격", "fiyat", "ár")
_BRAND_LABELS = ("brand", "brand name", "manufacturer", "marke", "hersteller", "marque", "fabricant", "marca",
                 "produttore", "fabricante", "merk", "märke", "producent", "marka", "производитель", "бренд",
                 "ブランド", "メーカー", "品牌", "브랜드", "marka ad\u0131")
_GTIN_LABELS = ("gtin", "ean", "ean code", "ean-code", "ean13", "upc", "isbn", "isbn-13", "isbn 13", "isbn13",
                "barcode", "código de barras", "code ean", "codice ean", "strichcode")
_MPN_LABELS = ("mpn", "manufacturer part number", "herstellernummer", "hersteller-artikelnummer",
               "référence fabricant", "codice produttore", "número de pieza del fabricante", "part no")
_AVAILABILITY_LABELS = ("availability", "stock", "in stock", "verfügbarkeit", "lieferbarkeit", "disponibilité",
                        "disponibilità", "disponibilidad", "disponibilidade", "beschikbaarheid", "lagerstatus",
                        "наличие", "在庫", "库存", "재고")

# A product offered in several sizes or by several sellers can be bought while any of its offers can.
ANY_OFFER_AVAILABLE = ("length(to_array(offers)[?ends_with(to_string(availability), 'InStock') || "
                       "ends_with(to_string(availability), 'LimitedAvailability') || "
                       "ends_with(to_string(availability), 'OnlineOnly') || "
                       "ends_with(to_string(availability), 'InStoreOnly')]) > `0`")

PRODUCT = TargetSchema("product", ("Product", "ProductGroup", "IndividualProduct", "ProductModel", "Book", "Vehicle",
                                   "SomeProducts", "Car"), (
    TargetField("name", paths=("name",), meta=("og:title", "twitter:title"), itemprops=("name",),
                why="the product's name"),
    TargetField("price", "price", paths=("offers[0]", "offers", "offers.priceSpecification", "price"),
                meta=("product:price:amount", "og:price:amount", "product:sale_price:amount"),
                itemprops=("price",), labels=_PRICE_LABELS, why="the price a buyer pays, with its currency"),
    TargetField("currency", paths=("offers[0].priceCurrency", "offers.priceCurrency", "priceCurrency"),
                meta=("product:price:currency", "og:price:currency"), itemprops=("priceCurrency",),
                why="the ISO 4217 currency of the price"),
    TargetField("sku", paths=("sku", "offers[0].sku", "offers.sku", "productID"),
                meta=("product:retailer_item_id", "product:sku"), itemprops=("sku", "productID"), labels=_SKU_LABELS,
                why="the shop's identifier of the product"),
    TargetField("brand", paths=("brand.name", "brand[0].name", "brand", "manufacturer.name"),
                meta=("product:brand", "og:brand"), itemprops=("brand",), labels=_BRAND_LABELS,
                why="the brand or maker"),
    TargetField("availability", "bool", paths=(ANY_OFFER_AVAILABLE, "offers[0].availability", "offers.availability",
                                                  "availability"),
                meta=("product:availability", "og:availability"), itemprops=("availability",),
                labels=_AVAILABILITY_LABELS, why="in stock (true) or not: schema.org's InStock / OutOfStock"),
    TargetField("gtin", paths=("gtin13", "gtin", "gtin12", "gtin14", "gtin8", "isbn", "offers[0].gtin13"),
                meta=("product:ean", "product:upc", "product:isbn"), itemprops=("gtin13", "gtin", "gtin12", "gtin14",
                                                                                "gtin8", "isbn"),
                labels=_GTIN_LABELS, why="the global trade item number (EAN, UPC, ISBN)"),
    TargetField("mpn", paths=("mpn",), itemprops=("mpn",), labels=_MPN_LABELS, why="the maker's part number"),
    TargetField("image", "url", paths=("image[0].url", "image[0]", "image.url", "image"), meta=("og:image",),
                itemprops=("image",), why="the main picture"),
    TargetField("description", paths=("description",), meta=("og:description", "description"),
                itemprops=("description",), why="the product's description"),
))

JOB_POSTING = TargetSchema("job_posting", ("JobPosting",), (
    TargetField("title", paths=("title", "name"), meta=("og:title",), itemprops=("title",), why="the job's title"),
    TargetField("hiring_organization", paths=("hiringOrganization.name", "hiringOrganization"),
                itemprops=("hiringOrganization",), labels=("company", "employer", "organisation", "organization",
                                                           "unternehmen", "arbeitgeber", "entreprise", "empresa"),
                why="who hires"),
    TargetField("date_posted", "datetime", paths=("datePosted",), itemprops=("datePosted",),
                labels=("posted", "date posted", "published", "veröffentlicht", "publié le"), why="when it was posted"),
    TargetField("valid_through", "datetime", paths=("validThrough",), itemprops=("validThrough",),
                labels=("closing date", "apply by", "deadline", "bewerbungsfrist", "date limite"),
                why="the last day to apply"),
    TargetField("job_location", paths=("jobLocation[0].address.addressLocality", "jobLocation.address.addressLocality",
                                       "jobLocation.address", "jobLocation"), itemprops=("jobLocation",),
                labels=("location", "job location", "standort", "arbeitsort", "lieu", "ubicación", "sede"),
                why="where the job is"),
    TargetField("base_salary", "price", paths=("baseSalary.value.value", "baseSalary.value.minValue", "baseSalary"),
                itemprops=("baseSalary",), labels=("salary", "pay", "gehalt", "salaire", "salario", "stipendio"),
                why="the pay, with its currency"),
    TargetField("employment_type", paths=("employmentType[0]", "employmentType"), itemprops=("employmentType",),
                labels=("job type", "employment type", "contract type", "anstellungsart", "type de contrat"),
                why="full time, part time, contract"),
    TargetField("description", paths=("description",), meta=("og:description", "description"),
                itemprops=("description",), why="the posting's text"),
))

ARTICLE = TargetSchema("article", ("Article", "NewsArticle", "BlogPosting", "TechArticle", "Report",
                                   "ScholarlyArticle", "LiveBlogPosting"), (
    TargetField("headline", paths=("headline", "name"), meta=("og:title", "twitter:title"),
                itemprops=("headline", "name"), why="the article's headline"),
    TargetField("author", paths=("author[0].name", "author.name", "author[0]", "author"),
                meta=("author", "article:author"), itemprops=("author",), labels=("by", "author", "autor", "auteur"),
                why="who wrote it"),
    TargetField("date_published", "datetime", paths=("datePublished",), meta=("article:published_time",),
                itemprops=("datePublished",), why="when it was published (timezone-aware)"),
    TargetField("body", paths=("articleBody",), itemprops=("articleBody",), why="the article's text"),
))

EVENT = TargetSchema("event", ("Event", "MusicEvent", "SportsEvent", "TheaterEvent", "ComedyEvent", "Festival",
                               "BusinessEvent", "EducationEvent", "ExhibitionEvent", "ScreeningEvent"), (
    TargetField("name", paths=("name",), meta=("og:title",), itemprops=("name",), why="the event's name"),
    TargetField("start_date", "datetime", paths=("startDate",), itemprops=("startDate",), why="when it starts"),
    TargetField("end_date", "datetime", paths=("endDate",), itemprops=("endDate",), why="when it ends"),
    TargetField("location", paths=("location.name", "location[0].name", "location.address", "location"),
                itemprops=("location",), labels=("venue", "location", "ort", "lieu"), why="where it happens"),
    TargetField("price", "price", paths=("offers[0]", "offers"), itemprops=("price",), why="a ticket's price"),
    TargetField("description", paths=("description",), meta=("og:description", "description"),
                itemprops=("description",), why="what it is"),
))

TARGET_SCHEMAS = {schema.name: schema for schema in (PRODUCT, JOB_POSTING, ARTICLE, EVENT)}


def schema_of_type(item_type: str | None) -> TargetSchema | None:
    """The target schema a schema.org @type belongs to (an ``Offer`` page is about a product)."""
    for schema in TARGET_SCHEMAS.values():
        if item_type in schema.types:
            return schema
    return PRODUCT if item_type in ("Offer", "AggregateOffer") else None
