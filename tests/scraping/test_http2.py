"""HTTP/2 where the site offers it, when HARVESTER_HTTP2 is on: a real TLS server speaking h2 (ALPN), and the
fetcher negotiates it. Off (the default), the fetcher speaks HTTP/1.1 through aiohttp."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from harvester.scraping.fetching.fetcher import Fetcher, FetchResult
from harvester.services.ports import LOOPBACK, free_port
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.integration
PAGE = b"<html><body><span class='sku'>SKU-H2</span></body></html>"


def self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, LOOPBACK)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LOOPBACK))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class H2Page(asyncio.Protocol):
    """Answers every request on every stream with PAGE, over HTTP/2 only."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.connection.initiate_connection()
        transport.write(self.connection.data_to_send())  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        for event in self.connection.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                self.connection.send_headers(event.stream_id, [
                    (":status", "200"), ("content-type", "text/html; charset=utf-8"),
                    ("content-length", str(len(PAGE)))])
                self.connection.send_data(event.stream_id, PAGE, end_stream=True)
        self.transport.write(self.connection.data_to_send())  # type: ignore[attr-defined]


@pytest.fixture
def h2_site(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    cert_path, key_path = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    context.set_alpn_protocols(["h2"])
    port = free_port()
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(H2Page, LOOPBACK, port, ssl=context))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"https://{LOOPBACK}:{port}", cert_path
    loop.call_soon_threadsafe(server.close)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)


def test_http2_is_negotiated_when_the_site_offers_it(h2_site, monkeypatch) -> None:
    url, cert_path = h2_site
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_path))  # trust the test's own certificate authority

    async def fetch_twice() -> list[FetchResult]:
        async with Fetcher(HarvesterSettings(http2=True)) as fetcher:
            source = demo_source(url)
            return list(await asyncio.gather(fetcher.fetch(f"{url}/a", source), fetcher.fetch(f"{url}/b", source)))

    for result in asyncio.run(fetch_twice()):
        assert result.ok, result.reason
        assert result.http_version == "HTTP/2" and "SKU-H2" in result.text


def test_plain_http_sites_get_http_1_1_keep_alive(demo_site) -> None:
    async def fetch() -> FetchResult:
        async with Fetcher(HarvesterSettings()) as fetcher:
            return await fetcher.fetch(f"{demo_site.url}/product/1", demo_source(demo_site.url))

    assert asyncio.run(fetch()).http_version == "HTTP/1.1"
