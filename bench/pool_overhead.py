"""What a proxy pool costs the crawl: the same crawl of an HTTP source with ``country: SG`` through a pool of one
proxy and through a pool of two, alternately, the crawl only (``output_sink=discard``).

Each pool is ``harvester forward-proxy`` processes on loopback named by the Airflow connections ``proxy_sg`` (and
``proxy_sg_2``). The CPU counted is the crawler's (distributor + Celery workers, the worker's guard proxy
included), never the forward proxies': ``pool_overhead_cpu`` is the CPU per page through two proxies over the CPU
per page through one, minus 1 (goal <= 0.05), the best round of each.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from rig import BIN, Processes  # beside this file

NOT_A_BENCH = "a part of bench/crawl.py: pool_overhead_cpu, the CPU a pool of two proxies costs over one"
KEYS = ("pool_overhead_cpu", "pool_one_proxy_cpu_ms_per_page", "pool_two_proxies_cpu_ms_per_page")


def start_forward_proxy(processes: Processes, label: str) -> str:
    """A ``harvester forward-proxy`` on a free loopback port; its URL once it listens."""
    from harvester.services import readiness
    from harvester.services.ports import LOOPBACK, free_port

    port = free_port()
    processes.start(f"forward-proxy-{label}", [str(BIN / "harvester"), "forward-proxy", "--host", LOOPBACK,
                                               "--port", str(port), "--label", label])
    readiness.wait_until(lambda: readiness.tcp_open(LOOPBACK, port), 30, f"forward proxy {label}")
    return f"http://{LOOPBACK}:{port}"


def proxy_requests(proxy: str) -> int:
    """Requests a ``harvester forward-proxy`` carried (its own ``/_proxy/stats``, asked directly)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{proxy}/_proxy/stats", timeout=10) as response:
        return int(json.load(response)["requests"])


def with_country(path: Path, country: str) -> Path:
    """The source file at ``path`` with ``country`` (its requests then go through the country's pool)."""
    document = yaml.safe_load(path.read_text())
    document["country"] = country
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def pool_overhead(processes: Processes, env: dict[str, str], source: Callable[[str], Path], site_url: str,
                  expected_pages: int, workers: int, repeat: int,
                  run_harvester: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """``pool_overhead_cpu`` and the CPU per page of each pool (ms), the best round of each."""
    proxies = [start_forward_proxy(processes, f"SG-{number}") for number in (1, 2)]
    one = {**env, "HARVESTER_OUTPUT_SINK": "discard", "AIRFLOW_CONN_PROXY_SG": proxies[0]}
    pools = {"one": one, "two": {**one, "AIRFLOW_CONN_PROXY_SG_2": proxies[1]}}
    runs: dict[str, list[dict[str, Any]]] = {"one": [], "two": []}
    for round_number in range(1, repeat + 1):  # alternate, so load from other programs hits both
        for label, pool_env in pools.items():
            path = with_country(source(f"pool_{label}_{round_number}"), "SG")
            runs[label].append(run_harvester(processes, pool_env, path, site_url, expected_pages, workers))
    carried = sum(proxy_requests(proxy) for proxy in proxies)
    crawled = sum(run["pages"] for results in runs.values() for run in results)
    if carried < crawled:  # the crawl went direct: the figure would say nothing of a pool
        raise RuntimeError(f"the SG proxies carried {carried} requests for {crawled} pages crawled")
    per_page = {label: min(run["cpu_seconds"] / run["pages"] for run in results if run["pages"])
                for label, results in runs.items()}
    for label, results in runs.items():
        print(f"pool of {label:3s} proxies: CPU ms/page per round: "
              + ", ".join(f"{1000 * run['cpu_seconds'] / max(run['pages'], 1):.2f} ({run['pages']} pages)"
                          for run in results), file=sys.stderr)
    return {"pool_overhead_cpu": round(per_page["two"] / per_page["one"] - 1, 3),
            "pool_one_proxy_cpu_ms_per_page": round(1000 * per_page["one"], 3),
            "pool_two_proxies_cpu_ms_per_page": round(1000 * per_page["two"], 3)}
