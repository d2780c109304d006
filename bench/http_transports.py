"""CPU per request of the fetcher's two HTTP transports (harvester.scraping.fetching.transports) on the demo site.

Starts the demo site on a free loopback port, then, alternately, sends the same GETs through
``AiohttpTransport`` (the default) and ``HttpxTransport`` (``HARVESTER_HTTP2``), 8 at a time as a worker
batch does, reading each raw body, and measures the process's CPU per request.

Usage: .venv/bin/python bench/http_transports.py [--requests 2000] [--rounds 2] [--smoke]
Prints one JSON object on its last line: ``aiohttp_cpu_ms_per_request``, ``httpx_cpu_ms_per_request``,
``httpx_vs_aiohttp`` (how many times more CPU httpx spends), best round of each. ``--smoke`` (CI:
tests/test_benches.py): 40 requests, one round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = ("bench", "requests", "rounds", "aiohttp_cpu_ms_per_request", "httpx_cpu_ms_per_request",
                 "httpx_vs_aiohttp")


async def one_round(transport_name: str, url: str, requests: int, batch: int) -> float:
    from harvester.scraping.fetching.transports import AiohttpTransport, HttpxTransport

    transport = AiohttpTransport() if transport_name == "aiohttp" else HttpxTransport()
    headers = {"User-Agent": "harvester-bench", "Accept": "text/html", "Accept-Encoding": "gzip, deflate, br"}

    async def get(number: int) -> None:
        response = await transport.get(f"{url}/product/{number % 2000 + 1}", headers)
        async for _ in response.raw_chunks():
            pass
        await response.aclose()

    try:
        await asyncio.gather(*(get(number) for number in range(batch)))  # connections open before timing
        started = time.process_time()
        for first in range(0, requests, batch):
            await asyncio.gather(*(get(number) for number in range(first, min(requests, first + batch))))
        return 1000 * (time.process_time() - started) / requests
    finally:
        await transport.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="40 requests, one round (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.rounds = 40, 1
    from harvester.services import readiness
    from harvester.services.ports import LOOPBACK, free_port
    from harvester.workers.batch import new_event_loop

    port = free_port()
    site = subprocess.Popen([str(BIN / "harvester-demo-site"), "--port", str(port), "--products", "2000",
                             "--latency-ms", "5", "--slow-every", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        readiness.wait_until(lambda: readiness.tcp_open(LOOPBACK, port), 30, "demo site")
        url = f"http://{LOOPBACK}:{port}"
        figures: dict[str, list[float]] = {"aiohttp": [], "httpx": []}
        for _ in range(args.rounds):
            for name in figures:
                loop = new_event_loop()  # uvloop, as in a worker
                try:
                    figures[name].append(loop.run_until_complete(one_round(name, url, args.requests, args.batch)))
                finally:
                    loop.close()
        for name, values in figures.items():
            print(f"{name:8s} CPU ms per request per round: {', '.join(f'{v:.3f}' for v in values)}", file=sys.stderr)
        best = {name: min(values) for name, values in figures.items()}
        print(json.dumps({"bench": "http_transports", "requests": args.requests, "rounds": args.rounds,
                          "aiohttp_cpu_ms_per_request": round(best["aiohttp"], 3),
                          "httpx_cpu_ms_per_request": round(best["httpx"], 3),
                          "httpx_vs_aiohttp": round(best["httpx"] / best["aiohttp"], 2)}))
    finally:
        site.terminate()
        site.wait(timeout=30)


if __name__ == "__main__":
    main()
