"""The DAG factory: one producer DAG per source file, and an import error for the files that do not load.

``dags/harvest_sources.py`` declares the DAGs of the valid files; ``dags/harvest_source_errors.py``
raises :class:`InvalidSourceFiles` naming each bad file, line and field, so the Airflow UI shows it
as an import error. The error lives in a file of its own on purpose: Airflow marks every DAG of a
file with an import error as stale (no longer scheduled), so an error raised by the factory file
would stop every source because of one typo.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
from airflow.sdk import DAG, Param

from harvester.config import (
    BATCH_SIZE_PARAM,
    DETAIL_URLS_PARAM,
    MAX_BATCH_SIZE,
    MAX_PACKAGES_PARAM,
    REEXTRACT_RUN_PARAM,
    REEXTRACT_SINCE_PARAM,
    SOURCE_SUFFIXES,
    URLS_PARAM,
    SourceConfig,
    SourceConfigError,
    SourceSet,
    default_directory,
    format_duration,
    load_source_file,
    load_sources,
)
from harvester.errors import InvalidSourceFiles

DAG_ID_PREFIX = "harvest_"
START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
TASK_RETRY_DELAY = timedelta(minutes=1)
# Airflow validates every Param of a scheduled DAG at parse time with jsonschema, which checks the
# schema against its meta-schema first; draft-07's meta-schema checks about 4x faster than the default
# 2020-12 one, which matters at 500 sources x 3 params. Our schemas use nothing newer than draft-07.
_PARAM_DIALECT = {"$schema": "http://json-schema.org/draft-07/schema#"}


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
    """What a manual trigger may override: batch size, max packages, a subset of URLs, the quality thresholds."""
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
            title="URLs", description="When not empty, harvest only these URLs instead of the source's input "
                                      "(pages of its input kind: listing pages on a listing source).",
            **_PARAM_DIALECT,
        ),
        DETAIL_URLS_PARAM: Param(
            [], type="array", items={"type": "string", "pattern": "^https?://"},
            title="Detail URLs", description="When not empty, harvest only these detail pages again now (on a "
                                             "listing source too), fetched in full with the current config.",
            **_PARAM_DIALECT,
        ),
        **quality_params(source),
        **reextraction_params(source),
    }


def reextraction_params(source: SourceConfig) -> dict[str, Param]:
    """A source with an archive can be re-extracted from the trigger form: its current config over the archived
    pages of a window, no request to the site."""
    if not source.output.archive.enabled:
        return {}
    return {
        REEXTRACT_SINCE_PARAM: Param(
            "", type="string", pattern=r"^(\s*\d+\s*[smhdw]\s*)?$", title="Re-extract since",
            description="Instead of harvesting, re-extract the pages archived in this last while (7d, 12h) with "
                        "the current config: no request reaches the site.", **_PARAM_DIALECT),
        REEXTRACT_RUN_PARAM: Param(
            "", type="string", title="Re-extract run",
            description="Instead of harvesting, re-extract the pages archived by this run id.", **_PARAM_DIALECT),
    }


def quality_params(source: SourceConfig) -> dict[str, Param]:
    """The run's quality thresholds, the source's by default: a trigger may loosen or tighten them."""
    quality = source.quality
    share = {"type": "number", "minimum": 0, "maximum": 1, **_PARAM_DIALECT}
    return {
        "min_stored_share": Param(quality.min_stored_share, title="Quality: min stored share",
                                  description="Share (0-1) of the pages that answered whose records must be stored.",
                                  **share),
        "max_rejected_share": Param(quality.max_rejected_share, title="Quality: max rejected share",
                                    description="Share (0-1) of extracted records that may be rejected.", **share),
        "max_dead_share": Param(quality.max_dead_share, title="Quality: max dead share",
                                description="Share (0-1) of settled tasks that may end in dead letters.", **share),
        "min_records": Param(quality.min_records, type="integer", minimum=0, title="Quality: min records",
                             description="Records the run must store (0: no minimum).", **_PARAM_DIALECT),
        "on_breach": Param(quality.on_breach, type="string", enum=["fail", "warn"], title="Quality: on breach",
                           description="fail: the run fails when a threshold is breached; warn: it stays green, "
                                       "flagged degraded.", **_PARAM_DIALECT),
    }


def build_source_dag(source: SourceConfig, file: Path | None = None,
                     upstream: Callable[[str], SourceConfig | None] | None = None) -> DAG:
    """The producer DAG of one source; its tasks are the producer's operators. ``upstream`` finds the sources
    a ``schedule: {after: [...]}`` names (their output Assets are the schedule)."""
    from harvester.airflow.assets import schedule_of
    from harvester.airflow.operators import add_producer_tasks
    from harvester.settings import get_settings

    tags = ["harvester", source.priority, source.render]
    if source.country:
        tags.append(source.country)
    with DAG(
        dag_id=dag_id_for(source.name),
        description=(source.description.strip().splitlines() or [f"Harvest {source.name}"])[0][:200],
        schedule=schedule_of(source, upstream or _upstream_file, get_settings()),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=tags,
        default_args={"owner": source.owner, "retries": source.retries, "retry_delay": TASK_RETRY_DELAY},
        doc_md=source_doc_md(source, file),
        render_template_as_native_obj=True,
    ) as dag:
        add_producer_tasks(source)
    # Params are set after the tasks: Airflow deep-copies a DAG's params into every task created
    # under it (a quarter of the parse time at 500 sources), while tasks read the DAG's params at
    # run time anyway (DagRun conf merged over dag.params), so the copies bought nothing.
    # The defaults come from the validated SourceConfig, whose bounds are the params' schemas, so
    # the attrs validator (a jsonschema meta-schema check per param, the other quarter) is skipped
    # here; every trigger's values are still validated by Airflow, and a test validates the defaults.
    with attrs.validators.disabled():
        dag.params = source_params(source)
    return dag


def invalid_sources_message(errors: Iterable[SourceConfigError]) -> str | None:
    """What the import error says, or None when every file loaded."""
    problems = [str(problem) for error in errors for problem in error.problems]
    if not problems:
        return None
    files = {error.file for error in errors}
    return (f"{len(files)} source file(s) could not be loaded (every other source has its DAG):\n"
            + "\n".join(problems))


def raise_for_invalid_sources(sources: SourceSet | None = None) -> None:
    """Raise :class:`InvalidSourceFiles` when any source file is bad (what the errors DAG file does)."""
    sources = sources if sources is not None else load_sources()
    if (message := invalid_sources_message(sources.errors)) is not None:
        raise InvalidSourceFiles(message)


def dag_id_being_parsed() -> str | None:
    """The DAG Airflow is parsing this file for (a task about to run, ``airflow dags test``), or None
    when it wants them all (the DAG processor)."""
    from airflow.sdk import get_parsing_context

    return get_parsing_context().dag_id


def _only_source(name: str) -> tuple[SourceConfig, Path] | None:
    """The usual layout, ``<name>.yaml``, read alone (so a task start does not validate 500 files)."""
    directory = default_directory()
    for suffix in SOURCE_SUFFIXES:
        path = directory / f"{name}{suffix}"
        if path.is_file():
            try:
                source = load_source_file(path)
            except SourceConfigError:
                return None  # the full load reports it (and may find the name in another file)
            return (source, path) if source.name == name else None
    return None


def build_source_dags(sources: SourceSet | None = None) -> list[DAG]:
    """The DAG of every valid source; bad files are left to :func:`raise_for_invalid_sources`.

    When Airflow parses the file for one DAG (``get_parsing_context().dag_id``: every task start
    does) only that DAG is built, from its own file when the layout allows; otherwise all of them.
    """
    wanted = dag_id_being_parsed()
    if wanted is not None and wanted.startswith(DAG_ID_PREFIX):
        name = wanted.removeprefix(DAG_ID_PREFIX)
        if sources is None and (found := _only_source(name)) is not None:
            return [build_source_dag(*found)]
        sources = sources if sources is not None else load_sources()
        if name in sources.sources:
            return [build_source_dag(sources.sources[name], sources.files.get(name), sources.sources.get)]
    sources = sources if sources is not None else load_sources()
    return [build_source_dag(source, sources.files.get(name), sources.sources.get)
            for name, source in sources.sources.items()]


def _upstream_file(name: str) -> SourceConfig | None:
    """A source a ``schedule.after`` names, read from its own file (the one-DAG parse of a task start)."""
    found = _only_source(name)
    return found[0] if found is not None else None
