"""Metadata that does not grow for ever: old runs of ``page_slots`` and ``harvest_*`` removed with `airflow db clean`.

``page_slots`` alone adds 1,440 DAG runs a day (one a minute), and every producer DAG one per scheduled
run, each with its task instances, XComs and log rows. Nothing in Airflow removes them on its own; its
documented tool is ``airflow db clean``. ``harvester metadata-cleanup`` runs it for Harvester's DAGs only
(other teams' DAGs in the same Airflow keep their history), for the rows older than
``metadata_retention_days``, without archive tables (an archive would grow as fast), and fails when a
table could not be cleaned (the CLI itself only logs that). Airflow keeps the latest scheduled run of each
DAG whatever its age, so scheduling continues where it was.

Run it where the Airflow CLI reaches the metadata database (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``):
compose's ``airflow-maintenance`` service does once a day; elsewhere a cron job or a Kubernetes CronJob
with the scheduler's image and environment. It is not a DAG because Airflow 3 blocks task code from the
metadata database (a task's environment names ``airflow-db-not-allowed:///``).

This module runs the CLI in a subprocess and imports nothing of Airflow (the ``harvester`` command loads it).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harvester.settings import HarvesterSettings, get_settings

log = logging.getLogger(__name__)

PAGE_SLOTS_DAG_ID = "page_slots"
HARVEST_DAG_PREFIX = "harvest_"  # harvester.airflow.dags.DAG_ID_PREFIX, without importing Airflow
# dag_run cascades to task_instance (and its XComs, history, reschedules, deadlines); the others hold their own
# dag_id. Not task_reschedule: see UNFILTERABLE_TABLES.
TABLES = ("dag_run", "task_instance", "task_instance_history", "xcom", "log")
# Airflow 3.3's cleanup config gives these tables a dag_id column they do not have, so `--dag-ids` fails on them
# (a ProgrammingError it logs and skips; `deadline` is added as a dependant of dag_run whatever we ask). Their
# rows go with their dag_run / task_instance by the foreign keys' ON DELETE CASCADE, so skipping them loses
# nothing; a failure on any other table fails the cleanup.
UNFILTERABLE_TABLES = frozenset({"deadline", "task_reschedule"})
_TABLE_FAILED = re.compile(r"Encountered error when attempting to clean table '([^']+)'")


def harvester_dag_ids(source_names: Iterable[str]) -> list[str]:
    return [PAGE_SLOTS_DAG_ID, *(f"{HARVEST_DAG_PREFIX}{name}" for name in sorted(source_names))]


def cleanup_command(dag_ids: Sequence[str], before: datetime, dry_run: bool = False,
                    airflow: str | None = None) -> list[str]:
    """The `airflow db clean` command line for ``dag_ids``' rows older than ``before``."""
    executable = airflow or str(Path(sys.executable).with_name("airflow"))
    command = [executable, "db", "clean", "--clean-before-timestamp", before.astimezone(UTC).isoformat(),
               "--tables", ",".join(TABLES), "--dag-ids", ",".join(dag_ids), "--skip-archive", "--yes"]
    return [*command, "--dry-run"] if dry_run else command


def clean_metadata(settings: HarvesterSettings, dry_run: bool = False,
                   now: datetime | None = None, environ: dict[str, str] | None = None,
                   extra_dag_ids: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """Remove the metadata rows of Harvester's DAGs older than the retention; the CLI's output is returned."""
    from harvester.config import load_sources

    names = load_sources(settings.sources_dir).sources
    before = (now or datetime.now(UTC)) - timedelta(days=settings.metadata_retention_days)
    command = cleanup_command([*harvester_dag_ids(names), *extra_dag_ids], before, dry_run)
    log.info("cleaning Airflow metadata of %d DAGs older than %s", len(names) + 1, before.isoformat())
    result = subprocess.run(command, env=dict(environ if environ is not None else os.environ), capture_output=True,
                            text=True, timeout=3600, stdin=subprocess.DEVNULL)
    if result.returncode == 0 and (failed := failed_tables(result.stdout + result.stderr)):
        result.returncode = 1
        result.stderr += f"\nthese tables could not be cleaned: {', '.join(sorted(failed))}\n"
    return result


def failed_tables(output: str) -> set[str]:
    """The tables `airflow db clean` reported it could not clean, apart from UNFILTERABLE_TABLES."""
    return set(_TABLE_FAILED.findall(output)) - UNFILTERABLE_TABLES


def command_metadata_cleanup(args: argparse.Namespace) -> int:
    settings = get_settings()
    if args.retention_days is not None:
        settings = settings.model_copy(update={"metadata_retention_days": args.retention_days})
    while True:
        result = clean_metadata(settings, dry_run=args.dry_run, extra_dag_ids=args.dag_id or ())
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        if result.returncode != 0:
            print(f"airflow db clean failed (exit {result.returncode})", file=sys.stderr)
            if not args.every_hours:
                return result.returncode
        if not args.every_hours:
            return 0
        time.sleep(args.every_hours * 3600)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "metadata-cleanup", help="remove old runs of page_slots and harvest_* from Airflow's metadata database")
    parser.add_argument("--retention-days", type=float, default=None,
                        help="keep this many days (default: the metadata_retention_days setting)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be deleted")
    parser.add_argument("--dag-id", action="append", help="also clean this DAG (repeatable)")
    parser.add_argument("--every-hours", type=float, default=0,
                        help="run again every this many hours (compose's maintenance service: 24)")
    parser.set_defaults(handler=command_metadata_cleanup)
