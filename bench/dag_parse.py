"""How long the DAG factory takes to parse 500 sources, and how much memory the parse needs.

Generates N source files (a mix of http listing, browser and MongoDB-input sources) in a scratch
directory, then in fresh subprocesses (as Airflow's DAG processor does: one process per parse)
times a real ``DagBag`` parse of ``dags/harvest_sources.py`` and, in a separate run under
tracemalloc, measures the parse's peak Python memory. The goal is under 2 s for 500 sources
(Airflow's own per-file import timeout is 30 s). A first, untimed parse writes the modules' bytecode,
as a deployment's first parse does (``PYTHONDONTWRITEBYTECODE`` is dropped for the children). It also
times the parse a task start makes, with Airflow's parsing context naming one DAG
(``_AIRFLOW_PARSING_CONTEXT_DAG_ID``, what ``get_parsing_context().dag_id`` reads): ``one_dag_s``.
Last line: JSON with ``parse_s``, ``one_dag_s`` and ``peak_mb``.

    .venv/bin/python bench/dag_parse.py [--sources 500] [--runs 3] [--smoke]

``--smoke`` (CI: tests/test_benches.py): 10 sources, one timed run, no untimed first parse.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
DAG_FILE = REPOSITORY_ROOT / "dags" / "harvest_sources.py"
GOAL_SECONDS = 2.0
# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = (
    "bench", "sources", "dags", "runs", "parse_s", "parse_s_all", "parse_cpu_s", "one_dag_s", "one_dag_s_all",
    "one_dag_dags", "peak_mb", "max_rss_mb", "breakdown_s", "load_avg_1m", "goal", "ok",
)

HTTP_SOURCE = """\
# yaml-language-server: $schema=./source.schema.json
name: {name}
description: Generated source {number} for the DAG parse benchmark.
owner: team{team}
schedule: "{minute} */6 * * *"
priority: {priority}
rate_limit: {{max_active: {active}, per_minute: {per_minute}}}
batch: {{size: 50, max_packages: 20}}
harvesting_lag: 6h
input:
  seeds: ["https://shop{number}.example.com/list"]
listing:
  link_selectors: ["a.product::attr(href)"]
  next_page_selectors: ["a.next::attr(href)"]
  follow: "/product/\\\\d+"
  max_depth: 3
attributes:
  title: {{css: "h1::text", required: true}}
  sku: {{css: ".sku::text", required: true}}
  price: {{css: ".price::text", type: float}}
  stock: {{xpath: "//span[@class='stock']/text()", type: int}}
  tags: {{css: "li.tag::text", type: "list[str]"}}
output: {{collection: products_{number}, key: [sku]}}
"""

BROWSER_SOURCE = """\
name: {name}
schedule: "@daily"
render: browser
country: {country}
input:
  kind: details
  seeds: ["https://app{number}.example.com/p/1", "https://app{number}.example.com/p/2"]
attributes:
  title: "h1::text"
  price: {{css: ".price::text", type: float}}
blocked_resource_types: [image, font, media, stylesheet]
"""

MONGO_SOURCE = """\
name: {name}
schedule: "@hourly"
input:
  kind: details
  mongo: {{collection: inputs_{number}, filter: {{active: true, site: {number}}}, url_field: link}}
attributes:
  title: "h1::text"
  released: {{css: "time::attr(datetime)", type: date}}
"""


def write_sources(directory: Path, count: int) -> None:
    for number in range(count):
        name = f"bench_source_{number:04d}"
        template = (HTTP_SOURCE, HTTP_SOURCE, BROWSER_SOURCE, MONGO_SOURCE)[number % 4]
        text = template.format(
            name=name, number=number, team=number % 7, minute=number % 60,
            priority="high" if number % 5 == 0 else "normal", active=1 + number % 16,
            per_minute=60 + number, country=("SG", "MY", "PH", "TH", "ID", "VN")[number % 6],
        )
        (directory / f"{name}.yaml").write_text(text)


def child(measure_memory: bool, one_dag: bool = False) -> None:
    """One parse in this fresh process; Airflow itself is imported first and not counted."""
    import resource
    import tracemalloc

    from airflow.dag_processing.dagbag import DagBag

    if measure_memory:
        tracemalloc.start()
    started, started_cpu = time.perf_counter(), time.process_time()
    bag = DagBag(dag_folder=str(DAG_FILE), safe_mode=True)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    peak = tracemalloc.get_traced_memory()[1] if measure_memory else 0
    max_rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({
        "parse_s": elapsed, "parse_cpu_s": cpu, "dags": len(bag.dags), "import_errors": len(bag.import_errors),
        "peak_bytes": peak, "max_rss_kb": max_rss_kb, **({} if measure_memory or one_dag else breakdown()),
    }))


def breakdown() -> dict[str, float]:
    """Where a parse's time goes (measured again, warm): loading YAML, bare DAGs, the producer's tasks. Each
    part starts after a full garbage collection, so a collection the previous part left due is not charged
    to the next (one warm pass each: a cyclic collection inside one swings a part by 0.2 s)."""
    import gc

    import attrs
    from airflow.sdk import DAG
    from harvester.airflow import dags as airflow_dags
    from harvester.config.loader import load_sources

    gc.collect()
    started = time.perf_counter()
    sources = load_sources()
    load_s = time.perf_counter() - started
    gc.collect()
    loaded = time.perf_counter()
    for source in sources.sources.values():
        with DAG(dag_id=f"bare_{source.name}", schedule=source.schedule, start_date=airflow_dags.START_DATE,
                 doc_md=airflow_dags.source_doc_md(source),
                 default_args={"owner": source.owner, "retries": source.retries}) as dag:
            pass
        with attrs.validators.disabled():  # as the factory sets them
            dag.params = airflow_dags.source_params(source)
    bare_s = time.perf_counter() - loaded
    gc.collect()
    built = time.perf_counter()
    airflow_dags.build_source_dags(sources)
    full_s = time.perf_counter() - built
    return {"load_s": load_s, "bare_dags_s": bare_s, "producer_tasks_s": full_s - bare_s}


def run_child(sources_dir: Path, airflow_home: Path, measure_memory: bool, one_dag_id: str | None = None) -> dict:
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAG_FILE.parent),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "HARVESTER_SOURCES_DIR": str(sources_dir),
        **({"_AIRFLOW_PARSING_CONTEXT_DAG_ID": one_dag_id} if one_dag_id else {}),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a deployment parses from compiled modules: so does the bench
    command = [sys.executable, __file__, "--child", *(["--memory"] if measure_memory else []),
               *(["--one-dag"] if one_dag_id else [])]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=REPOSITORY_ROOT)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3, help="timed parses, each in a fresh process")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--one-dag", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="10 sources, one timed run (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.sources, args.runs = 10, 1
    if args.child:
        child(args.memory, args.one_dag)
        return

    with tempfile.TemporaryDirectory(prefix="harvester-bench-") as scratch:
        sources_dir, airflow_home = Path(scratch) / "sources", Path(scratch) / "airflow"
        sources_dir.mkdir()
        airflow_home.mkdir()
        write_sources(sources_dir, args.sources)
        if not args.smoke:  # a smoke run times nothing worth a parse of its own
            run_child(sources_dir, airflow_home, measure_memory=False)  # not timed: writes the modules' bytecode
        timings = [run_child(sources_dir, airflow_home, measure_memory=False) for _ in range(args.runs)]
        memory = run_child(sources_dir, airflow_home, measure_memory=True)
        one_dag_id = "harvest_bench_source_0001"
        one = [run_child(sources_dir, airflow_home, measure_memory=False, one_dag_id=one_dag_id)
               for _ in range(args.runs)]

    parse_times = [timing["parse_s"] for timing in timings]
    dags = timings[0]["dags"]
    if dags != args.sources or timings[0]["import_errors"]:
        raise SystemExit(f"expected {args.sources} DAGs and no import errors, got {timings[0]}")
    parse_s = statistics.median(parse_times)
    parse_cpu_s = statistics.median(timing["parse_cpu_s"] for timing in timings)
    peak_mb = memory["peak_bytes"] / 1024 / 1024
    print(f"{args.sources} sources -> {dags} DAGs; DagBag parse of {DAG_FILE.name}: "
          f"median {parse_s:.3f} s over {args.runs} fresh processes (all: "
          f"{', '.join(f'{value:.3f}' for value in parse_times)}); CPU time {parse_cpu_s:.3f} s "
          f"(wall minus waiting for a core on a shared machine); goal < {GOAL_SECONDS} s")
    parts = {key: round(statistics.median(timing[key] for timing in timings), 3)
             for key in ("load_s", "bare_dags_s", "producer_tasks_s")}
    print(f"where the time goes (warm, median): loading and validating YAML {parts['load_s']} s, "
          f"DAG objects with params {parts['bare_dags_s']} s, the producer's tasks {parts['producer_tasks_s']} s")
    one_dag_s = statistics.median(timing["parse_s"] for timing in one)
    print(f"parse for one task start (parsing context dag_id {one_dag_id}): median {one_dag_s:.3f} s, "
          f"{one[0]['dags']} DAG(s) built")
    print(f"peak Python memory during the parse (tracemalloc): {peak_mb:.1f} MB; "
          f"process max RSS incl. Airflow: {timings[0]['max_rss_kb'] / 1024:.0f} MB")
    print(json.dumps({
        "bench": "dag_parse", "sources": args.sources, "dags": dags, "runs": args.runs,
        "parse_s": round(parse_s, 3), "parse_s_all": [round(value, 3) for value in parse_times],
        "parse_cpu_s": round(parse_cpu_s, 3),
        "one_dag_s": round(one_dag_s, 3), "one_dag_s_all": [round(timing["parse_s"], 3) for timing in one],
        "one_dag_dags": one[0]["dags"],
        "peak_mb": round(peak_mb, 1), "max_rss_mb": round(timings[0]["max_rss_kb"] / 1024, 1),
        "breakdown_s": parts, "load_avg_1m": round(os.getloadavg()[0], 2),
        "goal": GOAL_SECONDS, "ok": parse_s < GOAL_SECONDS,
    }))


if __name__ == "__main__":
    main()
