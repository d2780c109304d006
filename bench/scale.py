"""Harvester at 5,000 sources: the DAG parse, one task start, the distributor and the metrics, each against
a peer measured in the same run.

1. Parse (fresh processes, as Airflow's DAG processor forks one per parse, with the DAG file's imports
   loaded first as its ``parsing_pre_import_modules`` does): a ``DagBag`` of ``dags/harvest_sources.py``
   over N generated sources of every kind (bench/dag_parse.py's http listing, browser and MongoDB-input
   files), against Airflow's own floor: a generated DAG file that builds the same N DAGs (same ids,
   schedules, tags, default args, docs and params) with the same four tasks as ``EmptyOperator``s and no
   YAML. ``parse_cpu_s_5000`` is ours with a warm source cache (every parse after the first: the files
   did not change), ``parse_ratio_5000`` ours over the floor's CPU (goal <= 1.5); the cold parse (empty
   cache) is printed beside it. ``one_dag_s_5000``: a task start's parse (parsing context naming one
   DAG), goal <= 0.3 s.
2. Distributor (bench/distributor.py's set-up, one redis-server): N registered sources of which 500
   have work, against 8 registered sources all with work, the same number of tasks:
   ``admission_ratio_5000`` = admitted/s with N over admitted/s with 8 (goal >= 0.8), and the Redis memory
   per idle registered source (``redis_bytes_per_idle_source``). Then the fixed cost of a round itself:
   ``idle_round_ms_5000`` and ``idle_round_ms_8``, the median time of a round with every task admitted
   (what a round costs before it admits anything, which the 40,000 tasks' few rounds hide), and
   ``reap_ms_5000`` / ``reap_ms_8``, the median reap (every ``reap_interval_seconds``) with the admitted tasks
   still reserved.
3. Metrics: the collector over N registered sources that all recorded requests and their run's host figures
   (one in 50 over 20 site hosts), with
   ``metrics_detailed_sources`` unset (every source gets every series) and at 100 (the 100 busiest keep
   theirs; the others' histograms are summed into ``source="_other"``): series and scrape time of each,
   and ``series_per_source`` with the setting on (goal <= 20). The bench's sources never failed, retried, were
   reaped, saw a changed record or a 304, or re-launched a browser, so a source outside the 100 leaves those
   counters out (harvester.metrics.collector.ONCE_MOVED_COUNTERS); ``series_per_source_moved`` is the same scrape
   once every source moved each of them: the most a fleet can have.

Usage: .venv/bin/python bench/scale.py [--sources 5000] [--runs 3] [--tasks 40000] [--skip parse,distributor,metrics]
       [--smoke]
The last line is JSON with every figure named above. ``--smoke`` (CI: tests/test_benches.py): 40 sources, one
run, 1,200 tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY / "include"))
sys.path.insert(0, str(REPOSITORY / "bench"))

from dag_parse import write_sources  # noqa: E402

DAG_FILE = REPOSITORY / "dags" / "harvest_sources.py"
PARSE_RATIO_GOAL = 1.5
ONE_DAG_GOAL_S = 0.3
ADMISSION_RATIO_GOAL = 0.8
SERIES_PER_SOURCE_GOAL = 20
ACTIVE_SOURCES = 500
IDLE_ROUNDS = 21  # rounds timed after every task is admitted
DETAILED_SOURCES = 100  # metrics_detailed_sources in the lean scrape
# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there);
# {sources} stands for the run's number of sources, the line's own "sources".
PROMISED_KEYS = (
    "bench", "sources",
    "parse_cpu_s_{sources}", "parse_s_{sources}", "floor_parse_cpu_s_{sources}", "parse_ratio_{sources}",
    "parse_cold_cpu_s_{sources}", "parse_uncached_cpu_s_{sources}", "one_dag_s_{sources}",
    "one_dag_cpu_s_{sources}", "one_dag_dags",
    "idle_round_ms_{sources}", "idle_round_ms_8", "reap_ms_{sources}", "reap_ms_8", "admitted_per_s_{sources}",
    "admitted_per_s_8", "admission_ratio_{sources}", "admission_tasks", "admission_sources_with_work",
    "redis_bytes_per_idle_source",
    "series_{sources}", "scrape_s_{sources}", "scrape_mb_{sources}", "series_{sources}_lean",
    "scrape_s_{sources}_lean", "series_per_source_full", "series_per_source",
    "load_avg_1m", "goals_met",
)

FLOOR_HEADER = '''"""Airflow's floor: harvest_sources.py's DAGs from Python literals, tasks as EmptyOperators."""
import attrs
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, Param

from harvester.airflow.dags import START_DATE, TASK_RETRY_DELAY

SOURCES = '''

FLOOR_BODY = '''
for spec in SOURCES:
    with DAG(dag_id=spec["dag_id"], description=spec["description"], schedule=spec["schedule"],
             start_date=START_DATE, catchup=False, max_active_runs=1, tags=spec["tags"],
             default_args={"owner": spec["owner"], "retries": spec["retries"], "retry_delay": TASK_RETRY_DELAY},
             doc_md=spec["doc_md"], render_template_as_native_obj=True) as dag:
        plan = EmptyOperator(task_id="plan")
        produce = EmptyOperator(task_id="produce")
        wait = EmptyOperator(task_id="wait_for_harvest")
        report = EmptyOperator(task_id="report", outlets=[Asset(name=spec["asset_name"], uri=spec["asset_uri"])])
        plan >> produce >> wait >> report
    with attrs.validators.disabled():
        dag.params = {name: Param(**param) for name, param in spec["params"].items()}
    globals()[dag.dag_id] = dag
'''


def write_floor_dag_file(sources_dir: Path, target: Path) -> None:
    """The floor DAG file: every DAG attribute precomputed from the sources, written as a Python literal."""
    from harvester.airflow import dags as airflow_dags
    from harvester.airflow.operators import output_asset
    from harvester.config.loader import load_sources
    from harvester.settings import get_settings

    loaded = load_sources(sources_dir)
    specs = []
    for name, source in loaded.sources.items():
        dag = airflow_dags.build_source_dag(source, loaded.files[name])
        asset = output_asset(source, get_settings())
        specs.append({
            "dag_id": dag.dag_id, "description": dag.description, "schedule": source.schedule,
            "tags": sorted(dag.tags), "owner": source.owner, "retries": source.retries, "doc_md": dag.doc_md,
            "asset_name": asset.name, "asset_uri": asset.uri,
            "params": {key: {"default": param.value, **param.schema}
                       for key, param in airflow_dags.source_params(source).items()},
        })
    target.write_text(FLOOR_HEADER + repr(specs) + "\n" + FLOOR_BODY)


def parse_child(dag_file: str, pre_import: str) -> None:
    """One DagBag parse in this fresh process (Airflow and the file's imports loaded first, not counted)."""
    import importlib

    from airflow.dag_processing.dagbag import DagBag

    for module in filter(None, pre_import.split(",")):
        importlib.import_module(module)
    started, started_cpu = time.perf_counter(), time.process_time()
    bag = DagBag(dag_folder=dag_file, safe_mode=True)
    print(json.dumps({"parse_s": time.perf_counter() - started, "parse_cpu_s": time.process_time() - started_cpu,
                      "dags": len(bag.dags), "import_errors": {k: v[-500:] for k, v in bag.import_errors.items()}}))


def run_parse(dag_file: Path, pre_import: str, env: dict[str, str]) -> dict:
    result = subprocess.run([sys.executable, __file__, "--parse-child", str(dag_file), pre_import], env=env,
                            capture_output=True, text=True, cwd=REPOSITORY)
    if result.returncode:
        raise SystemExit(f"parse of {dag_file} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def bench_parse(count: int, runs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="harvester-scale-") as scratch:
        base = Path(scratch)
        sources_dir, home, cache = base / "sources", base / "airflow", base / "cache"
        floor_dir = base / "floor"
        for directory in (sources_dir, home, floor_dir):
            directory.mkdir()
        write_sources(sources_dir, count)
        env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
               "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING", "HARVESTER_SOURCES_DIR": str(sources_dir),
               # CPU is what is measured; on a shared machine a parse may wait longer than Airflow's 30 s for it
               "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "900",
               "HARVESTER_SOURCE_CACHE_DIR": str(cache), "PYTHONPATH": str(REPOSITORY / "include")}
        os.environ.update({"HARVESTER_SOURCES_DIR": str(sources_dir), "HARVESTER_SOURCE_CACHE_DIR": ""})
        floor_file = floor_dir / "floor_dags.py"
        write_floor_dag_file(sources_dir, floor_file)
        ours_imports = "harvester.airflow.dags,harvester.airflow.operators"
        floor_imports = "harvester.airflow.dags,airflow.providers.standard.operators.empty"
        cold = run_parse(DAG_FILE, ours_imports, env)  # fills the cache
        ours, floor = [], []
        for _ in range(runs):  # alternately, so a busy neighbour weighs on both alike
            ours.append(run_parse(DAG_FILE, ours_imports, env))
            floor.append(run_parse(floor_file, floor_imports, env))
        uncached = run_parse(DAG_FILE, ours_imports, {**env, "HARVESTER_SOURCE_CACHE_DIR": ""})
        one_dag_id = "harvest_bench_source_0001"
        one = [run_parse(DAG_FILE, ours_imports, {**env, "_AIRFLOW_PARSING_CONTEXT_DAG_ID": one_dag_id})
               for _ in range(runs)]
    for result in (cold, *ours, *floor):
        if result["dags"] != count or result["import_errors"]:
            raise SystemExit(f"expected {count} DAGs and no import errors, got {result}")
    ours_cpu = statistics.median(r["parse_cpu_s"] for r in ours)
    floor_cpu = statistics.median(r["parse_cpu_s"] for r in floor)
    figures = {
        f"parse_cpu_s_{count}": round(ours_cpu, 3),
        f"parse_s_{count}": round(statistics.median(r["parse_s"] for r in ours), 3),
        f"floor_parse_cpu_s_{count}": round(floor_cpu, 3),
        f"parse_ratio_{count}": round(ours_cpu / floor_cpu, 3),
        f"parse_cold_cpu_s_{count}": round(cold["parse_cpu_s"], 3),
        f"parse_uncached_cpu_s_{count}": round(uncached["parse_cpu_s"], 3),
        f"one_dag_s_{count}": round(statistics.median(r["parse_s"] for r in one), 3),
        f"one_dag_cpu_s_{count}": round(statistics.median(r["parse_cpu_s"] for r in one), 3),
        "one_dag_dags": one[0]["dags"],
    }
    print(f"parse of {count} sources: ours {ours_cpu:.2f} s CPU (warm cache; cold {cold['parse_cpu_s']:.2f} s, "
          f"no cache {uncached['parse_cpu_s']:.2f} s), Airflow's floor {floor_cpu:.2f} s -> ratio "
          f"{ours_cpu / floor_cpu:.2f} (goal <= {PARSE_RATIO_GOAL}); one task start "
          f"{figures[f'one_dag_s_{count}']:.3f} s (goal <= {ONE_DAG_GOAL_S})", file=sys.stderr)
    return figures


def bench_source_name(index: int) -> str:
    return f"bench_{index:05d}"


def bench_source(index: int, browser: bool = False):
    from harvester.config.model import SourceConfig

    return SourceConfig(name=bench_source_name(index), input={"seeds": ["http://bench.test/"], "kind": "details"},
                        attributes={"title": {"css": "h1"}}, priority="high" if index % 2 else "normal",
                        rate_limit={"max_active": 10_000, "per_minute": 1_000_000},
                        **({"render": "browser", "country": "SG"} if browser else {}))


def admission_rate(url: str, registered: int, with_work: int, tasks: int) -> dict:
    """Admitted and published per second by one distributor: ``registered`` sources, ``with_work`` of them
    holding ``tasks`` tasks between them (bench/distributor.py's loop: run_round until all are admitted)."""
    import redis
    from harvester.distributor import Intake, TaskMessage
    from harvester.distributor.service import Distributor, celery_app_for
    from harvester.settings import get_settings

    client = redis.Redis.from_url(url)
    client.flushall()
    settings = get_settings().model_copy(update={"queue_max_depth": 10_000_000, "reap_interval_seconds": 3600})
    intake = Intake(client, settings)
    sources = [bench_source(index) for index in range(registered)]
    for source in sources:
        intake.register_source(source)
    client.config_resetstat()
    idle_memory = int(client.info("memory")["used_memory"])
    # the sources with work are spread over the registered ones (every n-th), as real schedules would be
    step = max(1, registered // with_work)
    busy = sources[::step][:with_work]
    per_source = tasks // len(busy)
    distributor = Distributor(client, settings, app=celery_app_for(settings))
    distributor.run_round()  # warm up with nothing to admit: the registrations read, the publisher connected
    for source in busy:
        intake.push(source, [TaskMessage(source=source.name, url=f"http://bench.test/{source.name}/{n}",
                                         run_id="bench", package_id=n // 100) for n in range(per_source)])
    started = time.perf_counter()
    while distributor.totals.admitted < per_source * len(busy):
        distributor.run_round()
    seconds = time.perf_counter() - started
    admitted, rounds = distributor.totals.admitted, distributor.totals.rounds
    idle_rounds = []
    for _ in range(IDLE_ROUNDS):  # nothing left to admit: what every round pays before admitting
        round_started = time.perf_counter()
        distributor.run_round()
        idle_rounds.append(time.perf_counter() - round_started)
    distributor.reap()  # a sweep (every source), as at start
    reaps = []
    for _ in range(IDLE_ROUNDS):  # then what each reap_interval_seconds costs: the admitted tasks are reserved
        reap_started = time.perf_counter()
        distributor.reap()
        reaps.append(time.perf_counter() - reap_started)
    client.close()
    return {"admitted": admitted, "admitted_per_s": admitted / seconds, "rounds": rounds,
            "idle_memory": idle_memory, "idle_round_ms": statistics.median(idle_rounds) * 1000,
            "reap_ms": statistics.median(reaps) * 1000}


def bench_distributor(count: int, tasks: int) -> dict:
    from distributor import start_redis

    directory = Path(tempfile.mkdtemp(prefix="bench-scale-redis-"))
    process, url = start_redis(directory)
    os.environ["HARVESTER_REDIS_URL"] = url
    try:
        import redis
        from harvester.settings import get_settings

        get_settings.cache_clear()
        client = redis.Redis.from_url(url)
        client.flushall()
        empty = int(client.info("memory")["used_memory"])
        few, many = [], []
        for _ in range(2):  # alternately; the best of each (a busy neighbour should not decide the ratio)
            few.append(admission_rate(url, 8, 8, tasks))
            many.append(admission_rate(url, count, ACTIVE_SOURCES, tasks))
        best_few = max(few, key=lambda r: r["admitted_per_s"])
        best_many = max(many, key=lambda r: r["admitted_per_s"])
        per_idle = (many[0]["idle_memory"] - empty) / count
    finally:
        process.terminate()
        process.wait(20)
        shutil.rmtree(directory, ignore_errors=True)  # its AOF files
    ratio = best_many["admitted_per_s"] / best_few["admitted_per_s"]
    print(f"distributor: {best_many['admitted_per_s']:.0f} admitted/s with {count} registered sources "
          f"({ACTIVE_SOURCES} with work, {best_many['rounds']} rounds) against {best_few['admitted_per_s']:.0f}/s "
          f"with 8 -> ratio {ratio:.2f} (goal >= {ADMISSION_RATIO_GOAL}); Redis memory per idle registered "
          f"source {per_idle:.0f} bytes", file=sys.stderr)
    idle_many = min(r["idle_round_ms"] for r in many)
    idle_few = min(r["idle_round_ms"] for r in few)
    print(f"a round with nothing to admit: {idle_many:.2f} ms with {count} registered sources, {idle_few:.2f} ms "
          f"with 8", file=sys.stderr)
    reap_many, reap_few = min(r["reap_ms"] for r in many), min(r["reap_ms"] for r in few)
    print(f"a reap: {reap_many:.2f} ms with {count} registered sources ({ACTIVE_SOURCES} holding reservations), "
          f"{reap_few:.2f} ms with 8", file=sys.stderr)
    return {f"idle_round_ms_{count}": round(idle_many, 3), "idle_round_ms_8": round(idle_few, 3),
            f"reap_ms_{count}": round(reap_many, 3), "reap_ms_8": round(reap_few, 3),
            f"admitted_per_s_{count}": round(best_many["admitted_per_s"]),
            "admitted_per_s_8": round(best_few["admitted_per_s"]),
            f"admission_ratio_{count}": round(ratio, 3), "admission_tasks": tasks,
            "admission_sources_with_work": min(ACTIVE_SOURCES, count), "redis_bytes_per_idle_source": round(per_idle)}


MANY_HOSTS_EVERY = 50  # one source in 50 fetches from several site hosts (a broad harvest), the rest from one
MANY_HOSTS = 20


def seed_metrics(client, count: int) -> None:
    """Every source registered (a quarter of them browser sources), each with requests, both histograms and its
    run's host figures recorded, as the workers record them (harvester.metrics.recording); one in
    :data:`MANY_HOSTS_EVERY` over :data:`MANY_HOSTS` hosts."""
    from types import SimpleNamespace

    from harvester.distributor import Intake
    from harvester.metrics.recording import record_fetches
    from harvester.settings import HarvesterSettings

    intake = Intake(client, HarvesterSettings())
    pipeline = client.pipeline(transaction=False)
    now = time.time()
    for index in range(count):
        source = bench_source(index, browser=index % 4 == 2)
        intake.register_source(source)
        hosts = MANY_HOSTS if index % MANY_HOSTS_EVERY == 0 else 1
        messages = [SimpleNamespace(enqueued_at=now - 2.0 - page * 38.0, run_id="bench",
                                    url=f"http://site{(index + page) % hosts}.bench.test/{page}")
                    for page in range(MANY_HOSTS)]  # as many requests either way: "busiest" stays a tie
        fetches = [SimpleNamespace(outcome="ok", status=200, elapsed=0.2 + 1.2 * (page % 2), started_at=now - 1.0,
                                   tier="", transferred=0)
                   for page in range(len(messages))]
        record_fetches(client, source.name, messages, fetches, now=now, pipeline=pipeline)
        if index % 500 == 499:
            pipeline.execute()
    pipeline.execute()


def scrape(count: int, client, settings) -> tuple[int, float, int]:
    """Series in one scrape of the collector, the scrape's time (best of 3) and the bytes served."""
    from harvester.metrics.collector import metrics_registry
    from prometheus_client import generate_latest

    registry = metrics_registry(client, settings)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        text = generate_latest(registry)
        best = min(best, time.perf_counter() - started)
    series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    return series, best, len(text)


def bench_metrics(count: int) -> dict:
    from distributor import start_redis

    directory = Path(tempfile.mkdtemp(prefix="bench-scale-metrics-"))
    process, url = start_redis(directory)
    try:
        import redis
        from harvester.settings import HarvesterSettings

        client = redis.Redis.from_url(url)
        seed_metrics(client, count)
        full = scrape(count, client, HarvesterSettings(redis_url=url))
        lean = scrape(count, client, HarvesterSettings(redis_url=url, metrics_detailed_sources=DETAILED_SOURCES))
        move_rare_counters(client, count)
        moved = scrape(count, client, HarvesterSettings(redis_url=url, metrics_detailed_sources=DETAILED_SOURCES))
    finally:
        process.terminate()
        process.wait(20)
        shutil.rmtree(directory, ignore_errors=True)  # its AOF files
    print(f"metrics at {count} sources: every histogram {full[0]} series in {full[1]:.2f} s ({full[2] / 1e6:.1f} MB); "
          f"metrics_detailed_sources={DETAILED_SOURCES}: {lean[0]} series ({lean[0] / count:.1f} per source) "
          f"in {lean[1]:.2f} s; {moved[0] / count:.1f} per source once every counter moved",
          file=sys.stderr)
    return {f"series_{count}": full[0], f"scrape_s_{count}": round(full[1], 3),
            f"scrape_mb_{count}": round(full[2] / 1e6, 2),
            f"series_{count}_lean": lean[0], f"scrape_s_{count}_lean": round(lean[1], 3),
            "series_per_source_full": round(full[0] / count, 1), "series_per_source": round(lean[0] / count, 1),
            "series_per_source_moved": round(moved[0] / count, 1)}


def move_rare_counters(client, count: int) -> None:
    """One failure, retry, reap, changed record, 304 and browser re-launch for every source."""
    from harvester.redis_keys import SourceKeys

    pipeline = client.pipeline(transaction=False)
    for index in range(count):
        counters = SourceKeys(bench_source_name(index)).counters
        for field in ("failed", "retried", "reaped", "outcome:records_changed", "outcome:records_not_modified",
                      "outcome:browser_relaunches"):
            pipeline.hincrby(counters, field, 1)
    pipeline.execute()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--parse-child":
        parse_child(sys.argv[2], sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=40_000)
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: parse, distributor, metrics")
    parser.add_argument("--smoke", action="store_true", help="40 sources, one run, 1,200 tasks (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.sources, args.runs, args.tasks = 40, 1, 1200
    skip = set(filter(None, args.skip.split(",")))
    result: dict = {"bench": "scale", "sources": args.sources}
    if "parse" not in skip:
        result.update(bench_parse(args.sources, args.runs))
    if "distributor" not in skip:
        result.update(bench_distributor(args.sources, args.tasks))
    if "metrics" not in skip:
        result.update(bench_metrics(args.sources))
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    checks = {f"parse_ratio_{args.sources}": (PARSE_RATIO_GOAL, "le"),
              f"one_dag_s_{args.sources}": (ONE_DAG_GOAL_S, "le"),
              f"admission_ratio_{args.sources}": (ADMISSION_RATIO_GOAL, "ge"),
              "series_per_source": (SERIES_PER_SOURCE_GOAL, "le")}
    result["goals_met"] = {key: (result[key] <= goal if way == "le" else result[key] >= goal)
                           for key, (goal, way) in checks.items() if key in result}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
