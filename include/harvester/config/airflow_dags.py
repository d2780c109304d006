"""Airflow adapter: one producer DAG per source file (what ``dags/harvest_sources.py`` declares).

A bad source file must not take the other sources down with it, yet it must show in the Airflow
UI as an import error naming the file, the line and the field. The DagBag bags each DAG of a file
separately and records an import error for the file when a DAG's ``validate()`` raises, so every
bad file is carried by one extra DAG whose ``validate()`` raises :class:`InvalidSourceFiles` with
all the problems: that DAG is never bagged, the others are.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Param

from harvester.config.loader import SourceConfigError, SourceSet, load_sources
from harvester.config.model import MAX_BATCH_SIZE, SourceConfig, format_duration
from harvester.config.run_options import BATCH_SIZE_PARAM, MAX_PACKAGES_PARAM, URLS_PARAM

DAG_ID_PREFIX = "harvest_"
ERRORS_DAG_ID = "harvest_sources_invalid"
START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
TASK_RETRY_DELAY = timedelta(minutes=1)
# Airflow validates every Param of a scheduled DAG at parse time with jsonschema, which checks the
# schema against its meta-schema first; draft-07's meta-schema checks about 4x faster than the default
# 2020-12 one, which matters at 500 sources x 3 params. Our schemas use nothing newer than draft-07.
_PARAM_DIALECT = {"$schema": "http://json-schema.org/draft-07/schema#"}


class InvalidSourceFiles(ValueError):
    """Raised at DagBag validation for the source files that did not load (one line per problem)."""


class _InvalidSourcesDag(DAG):
    """Carries the errors of bad source files into the DagBag's import errors (see module docstring)."""

    harvester_errors: str = ""

    def validate(self) -> None:
        raise InvalidSourceFiles(self.harvester_errors)


def dag_id_for(source_name: str) -> str:
    return f"{DAG_ID_PREFIX}{source_name}"


def source_doc_md(source: SourceConfig, file: Path | None = None) -> str:
    """The DAG's documentation in the UI: what the source is and the limits it runs under."""
    limits = source.rate_limit
    inputs = []
    if source.input.seeds:
        inputs.append(f"{len(source.input.seeds)} seed URL(s)")
    if source.input.mongo is not None:
        mongo = source.input.mongo
        database = mongo.database or "(harvester database)"
        inputs.append(f"MongoDB `{database}.{mongo.collection}` field `{mongo.url_field}`")
    rows = [
        ("queue", f"`{source.queue}`"),
        ("render", source.render + (f" (country {source.country})" if source.country else "")),
        ("rate limit", f"{limits.max_active} in flight, {limits.per_minute} per minute (across all workers)"),
        ("batch", f"{source.batch.size} URLs per package, at most {source.batch.max_packages} packages per run"),
        ("harvesting lag", format_duration(source.harvesting_lag)),
        ("input", f"{source.input.kind} pages from " + " and ".join(inputs)),
        ("output", f"`{source.output.database or '(harvester database)'}.{source.output_collection}`"
                   f" keyed by {', '.join(source.output.key)}"),
        ("retries / timeout", f"{source.retries} / {source.timeout:g} s"),
        ("attributes", ", ".join(
            f"{name}{'*' if attribute.required else ''} ({attribute.type})"
            for name, attribute in source.attributes.items())),
    ]
    if source.listing is not None:
        rows.append(("listing", f"follow `{source.listing.follow}` up to depth {source.listing.max_depth}, "
                                f"at most {source.listing.max_new_urls} new URLs per run"))
    if file is not None:
        rows.append(("defined in", f"`{file.name}`"))
    table = "\n".join(f"| {label} | {value} |" for label, value in rows)
    description = source.description.strip() or f"Harvests the source `{source.name}`."
    return f"{description}\n\n| | |\n|---|---|\n{table}\n\n(* required attribute)\n"


def source_params(source: SourceConfig) -> dict[str, Param]:
    """What a manual trigger may override: batch size, max packages, and a subset of URLs."""
    return {
        BATCH_SIZE_PARAM: Param(
            source.batch.size, type="integer", minimum=1, maximum=MAX_BATCH_SIZE,
            title="Batch size", description="URLs per package for this run.", **_PARAM_DIALECT,
        ),
        MAX_PACKAGES_PARAM: Param(
            source.batch.max_packages, type="integer", minimum=1,
            title="Max packages", description="The batch limit: packages planned in this run.", **_PARAM_DIALECT,
        ),
        URLS_PARAM: Param(
            [], type="array", items={"type": "string", "pattern": "^https?://"},
            title="URLs", description="When not empty, harvest only these URLs instead of the source's input.",
            **_PARAM_DIALECT,
        ),
    }


def build_source_dag(source: SourceConfig, file: Path | None = None) -> DAG:
    """The producer DAG of one source; its tasks come from the producer component."""
    from harvester.producer.airflow_tasks import add_producer_tasks

    tags = ["harvester", source.priority, source.render]
    if source.country:
        tags.append(source.country)
    with DAG(
        dag_id=dag_id_for(source.name),
        description=(source.description.strip().splitlines() or [f"Harvest {source.name}"])[0][:200],
        schedule=source.schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=tags,
        default_args={"owner": source.owner, "retries": source.retries, "retry_delay": TASK_RETRY_DELAY},
        doc_md=source_doc_md(source, file),
        params=source_params(source),
        render_template_as_native_obj=True,
    ) as dag:
        add_producer_tasks(source)
    return dag


def build_errors_dag(errors: Iterable[SourceConfigError]) -> DAG | None:
    """The DAG that turns bad source files into one DagBag import error, or None when all are fine."""
    problems = [str(problem) for error in errors for problem in error.problems]
    if not problems:
        return None
    dag = _InvalidSourcesDag(dag_id=ERRORS_DAG_ID, schedule=None, start_date=START_DATE, tags=["harvester"])
    files = {line.split(":", 1)[0] for line in problems}
    dag.harvester_errors = (
        f"{len(files)} source file(s) could not be loaded; every other source has its DAG.\n"
        + "\n".join(problems)
    )
    return dag


def build_source_dags(sources: SourceSet | None = None) -> list[DAG]:
    """Every valid source's DAG, plus the carrier of the errors of the others (if any)."""
    sources = sources if sources is not None else load_sources()
    dags: list[DAG] = []
    errors = list(sources.errors)
    for name, source in sources.sources.items():
        file = sources.files.get(name)
        try:
            dags.append(build_source_dag(source, file))
        except Exception as error:  # one source's tasks failing to build must not hide the others
            from harvester.config.loader import Problem

            errors.append(SourceConfigError([Problem(
                str(file or name), 1, "(dag)", f"building the DAG failed: {type(error).__name__}: {error}"
            )]))
    if (errors_dag := build_errors_dag(errors)) is not None:
        dags.append(errors_dag)
    return dags
