"""`harvester runs`: a source's harvest runs and their progress, without opening Airflow.

Reads the ``runs`` and ``packages`` collections (connection ``mongo_default``), the source's output
(its ``output.connection_id``) and the dead letters in Redis (``redis_default``), like the sensor's
trigger does; ids resolve from ``AIRFLOW_CONN_<ID>``, else HARVESTER_MONGO_URI / HARVESTER_REDIS_URL.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    runs = subparsers.add_parser("runs", help="list a source's harvest runs, or show one run's progress")
    runs.add_argument("action", choices=["list", "show"])
    runs.add_argument("--source", required=True)
    runs.add_argument("--run-id", default=None, help="show: this run (default: the latest)")
    runs.add_argument("--limit", type=int, default=10, help="list: runs shown, newest first")
    runs.add_argument("--json", action="store_true")
    runs.set_defaults(handler=_runs)


def _runs(args: argparse.Namespace) -> int:
    from harvester.config import get_source
    from harvester.connections import MONGO_DEFAULT, ConnectionNotFound, mongo_client, redis_client
    from harvester.producer.progress import RunMonitor
    from harvester.settings import get_settings
    from harvester.storage import RunStore

    settings = get_settings()
    try:
        client = mongo_client(MONGO_DEFAULT, settings=settings)
    except ConnectionNotFound as error:
        print(error)
        return 2
    database = client[settings.mongo_database]
    runs = RunStore(database)
    if args.action == "list":
        documents = list(runs.collection.find({"source": args.source}, {"_id": 0})
                         .sort("started_at", -1).limit(args.limit))
        for document in documents:
            print(json.dumps(document, default=str) if args.json else _run_line(document))
        if not documents and not args.json:
            print(f"{args.source}: no runs")
        return 0
    run = (runs.get(args.source, args.run_id) if args.run_id
           else runs.collection.find_one({"source": args.source}, {"_id": 0}, sort=[("started_at", -1)]))
    if run is None:
        print(f"{args.source}: no run {args.run_id or ''}".rstrip())
        return 1
    source = get_source(args.source)
    output_client = mongo_client(source.output.connection_id, settings=settings)
    output = output_client[source.output.database or settings.mongo_database]
    progress = RunMonitor(database, output, redis_client(settings=settings)).measure(
        args.source, source.output_collection, run["run_id"])
    if args.json:
        print(json.dumps({"run": run, "progress": progress.to_dict()}, default=str))
    else:
        print(_run_line(run))
        print(progress.line())
    return 0


def _run_line(run: dict[str, Any]) -> str:
    plan = run.get("plan") or {}
    report = run.get("report") or {}
    figures = f"{plan.get('urls_planned', '?')} URLs in {plan.get('packages_total', '?')} packages"
    if report:
        figures += (f", {report.get('records_stored')} records ({report.get('records_new')} new), "
                    f"{report.get('tasks_failed')} failed, {report.get('duration_seconds')} s")
    return f"{run.get('started_at')}  {run['run_id']}  {run.get('status', '?')}  {figures}"
