"""`harvester runs`: a source's harvest runs and their progress, without opening Airflow; `harvester reextract`:
a source's archived pages extracted again with its current config (:mod:`harvester.producer.reextraction`).

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
    reextract = subparsers.add_parser(
        "reextract", help="run the source's current config over its archived pages (no request to the site)")
    reextract.add_argument("source")
    window = reextract.add_mutually_exclusive_group()
    window.add_argument("--run", default=None, help="the pages archived by this run")
    window.add_argument("--since", default=None, help="the pages archived in this last while (7d, 12h)")
    reextract.add_argument("--json", action="store_true")
    reextract.set_defaults(handler=_reextract)


def _reextract(args: argparse.Namespace) -> int:
    from harvester.config import get_source, parse_duration
    from harvester.errors import HarvesterError
    from harvester.producer.reextraction import Reextraction
    from harvester.settings import get_settings

    settings = get_settings()
    try:
        since = parse_duration(args.since) if args.since else None
        report = Reextraction.from_settings(settings).run(get_source(args.source), args.run, since)
    except (HarvesterError, LookupError, ValueError) as error:  # no such source, a bad window, the archive down
        print(f"reextract {args.source}: {error}")
        return 2
    if args.json:
        print(json.dumps(report, default=str))
    else:
        print(f"{args.source}: run {report['run_id']}: {report.get('pages_read', 0)} archived pages read, "
              f"{report.get('records_stored', 0)} records stored ({report.get('records_changed', 0)} changed), "
              f"{report.get('rejected', 0)} rejected, 0 requests; quality {report['quality']['outcome']}"
              + (f": {report['quality']['reason']}" if report["quality"]["reason"] else ""))
    return 0 if report["quality"]["outcome"] != "failed" else 1


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
    if report.get("kind") == "reextraction":  # no plan, no package: what it read from the archive
        figures = (f"re-extraction: {report.get('pages_read')} archived pages read, {report.get('records_stored')} "
                   f"records ({report.get('records_new')} new, {report.get('records_changed')} changed), "
                   f"{report.get('tasks_failed')} failed, {report.get('requests')} requests, "
                   f"{report.get('duration_seconds')} s")
        return f"{run.get('started_at')}  {run['run_id']}  {run.get('status', '?')}  {figures}"
    figures = f"{plan.get('urls_planned', '?')} URLs in {plan.get('packages_total', '?')} packages"
    if report:
        figures += (f", {report.get('records_stored')} records ({report.get('records_new')} new), "
                    f"{report.get('tasks_failed')} failed, {report.get('duration_seconds')} s")
        hosts = report.get("hosts")  # a run over several site hosts
        if hosts:
            slowest = hosts["slowest"][0] if hosts.get("slowest") else None
            figures += (f", hosts {hosts['done']}/{hosts['hosts']} done"
                        + (f" (slowest {slowest['host']} {slowest['mean_seconds']} s)" if slowest else ""))
    return f"{run.get('started_at')}  {run['run_id']}  {run.get('status', '?')}  {figures}"
