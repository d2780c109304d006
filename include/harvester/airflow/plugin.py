"""The Airflow plugin: the Harvester page, a "Harvest progress" tab on every run, and their JSON API.

Airflow mounts the FastAPI app under ``/harvester`` in the api-server but does not authenticate
plugin apps, so every route depends on Airflow's own security dependencies, or any visitor reads all:

- every route needs an authenticated user (the UI's session cookie or a bearer token), the pages, the
  static files and the OpenAPI schema included (FastAPI's ``/docs`` and ``/redoc`` are off);
- every read of one source needs read access (GET) to its DAG ``harvest_<source>`` (the export's download
  included: it is every record of the source), checked before any database work, and the lists
  (``/api/sources``) show only the sources whose DAG the user may read, as the auth manager (simple, FAB,
  Keycloak...) answers;
- changes need access to the DAG (PUT, as editing the DAG, to requeue dead letters; what Airflow's own
  trigger endpoint asks, POST on its runs, to start a job) AND an explicit request: a bearer token, or the
  ``X-Harvester-Request`` header the page's own script sends. A session cookie alone is what a cross-site
  form would carry, so it is refused (SameSite=Lax is not relied on).

The nav links are relative: the UI resolves them against its ``<base href>``, so they work when Airflow
is served under a sub-path. The figures come from harvester.observability.views.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag, requires_authenticated
from airflow.plugins_manager import AirflowPlugin
from fastapi import APIRouter, BackgroundTasks, Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from harvester.airflow.dags import DAG_ID_PREFIX, dag_id_for
from harvester.config import SourceConfig
from harvester.observability import (
    DeadLettersView,
    HarvestViews,
    RequeueResult,
    ResultsPage,
    RunProgressView,
    RunRecordsView,
    RunSummary,
    SlotsView,
    SourceSummary,
    UnknownSource,
)
from harvester.settings import get_settings
from harvester.storage import PageSnapshot

STATIC_DIRECTORY = Path(__file__).with_name("static")
STATIC_FILES = frozenset(path.name for path in STATIC_DIRECTORY.iterdir() if path.is_file())
URL_PREFIX = "/harvester"
RELATIVE_PREFIX = URL_PREFIX.lstrip("/")  # nav links are relative to the UI's <base href>
EXPLICIT_REQUEST_HEADER = "X-Harvester-Request"
SOURCES_TTL_SECONDS = 10.0


# -- clients and sources ------------------------------------------------------------------------------
class _State:
    """Clients of the api-server process and the source configs, re-read every few seconds."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sources: dict[str, SourceConfig] = {}
        self.sources_read_at = float("-inf")

    def views(self) -> HarvestViews:
        from harvester.airflow.operators import output_database_name
        from harvester.connections import MONGO_DEFAULT, mongo_client, redis_client

        settings = get_settings()
        with self.lock:
            if time.monotonic() - self.sources_read_at > SOURCES_TTL_SECONDS:
                from harvester.config import load_sources

                self.sources = dict(load_sources(settings.sources_dir).sources)
                self.sources_read_at = time.monotonic()
            sources = self.sources

        def output_database(source: SourceConfig) -> Any:
            return mongo_client(source.output.connection_id, settings=settings)[output_database_name(source, settings)]

        # the connection factory resolves the ids through Airflow here (mongo_default, redis_default)
        database = mongo_client(MONGO_DEFAULT, settings=settings)[settings.mongo_database]
        return HarvestViews(redis_client(settings=settings), database, sources, output_database, settings)


_state = _State()


def harvest_views() -> HarvestViews:
    return _state.views()


ViewsDep = Annotated[HarvestViews, Depends(harvest_views)]


def _source_or_404(views: HarvestViews, source: str) -> None:
    try:
        views.source(source)
    except UnknownSource:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no source {source!r}") from None


def requires_source_dag_edit(request: Request, user: GetUserDep, source: str) -> None:
    """Airflow's DAG authorisation, PUT (edit) on ``harvest_<source>``, for the path's source."""
    requires_access_dag("PUT", param_dag_id=dag_id_for(source))(request, user)


def requires_source_dag_read(request: Request, user: GetUserDep, source: str) -> None:
    """Airflow's DAG authorisation, GET (read) on ``harvest_<source>``, for the path's source."""
    requires_access_dag("GET", param_dag_id=dag_id_for(source))(request, user)


def requires_explicit_request(request: Request) -> None:
    """A state-changing request must carry a bearer token or the page's own header: a browser sends the
    session cookie with a cross-site form too, but neither of these (a custom header needs CORS, which
    this app does not grant)."""
    authorization = request.headers.get("authorization", "")
    if not authorization.lower().startswith("bearer ") and not request.headers.get(EXPLICIT_REQUEST_HEADER):
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            f"a change needs a bearer token or the {EXPLICIT_REQUEST_HEADER} header")


def readable_sources(user: Any, names: list[str]) -> set[str]:
    """The sources among ``names`` whose DAG ``user`` may read (GET), as Airflow's auth manager answers."""
    from airflow.api_fastapi.app import get_auth_manager

    by_dag = {dag_id_for(name): name for name in names}
    allowed = get_auth_manager().filter_authorized_dag_ids(dag_ids=set(by_dag), user=user, method="GET")
    return {by_dag[dag_id] for dag_id in allowed if dag_id in by_dag}


# -- the API --------------------------------------------------------------------------------------------
class JobRequest(BaseModel):
    source: str = Field(description="The source to harvest (its DAG is harvest_<source>).")
    urls: list[str] = Field(min_length=1, max_length=10_000, description="http(s) URLs to harvest now.")


class JobResponse(BaseModel):
    dag_id: str
    dag_run_id: str
    urls: int


api = APIRouter(prefix="/api", tags=["Harvester"], dependencies=[Depends(requires_authenticated())])


@api.get("/sources", summary="Every source whose DAG you may read: queue, limits, live counts, dead letters, last run")
def list_sources(views: ViewsDep, user: GetUserDep) -> list[SourceSummary]:
    readable = readable_sources(user, list(views.sources))
    return [summary for summary in views.source_summaries() if summary.name in readable]


@api.get("/sources/{source}", summary="One source", dependencies=[Depends(requires_source_dag_read)])
def get_source(source: str, views: ViewsDep) -> SourceSummary:
    try:
        return views.source_summary(source)
    except UnknownSource:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no source {source!r}") from None


@api.get("/sources/{source}/runs", summary="The source's harvest runs, newest first, with their reports",
         dependencies=[Depends(requires_source_dag_read)])
def list_runs(source: str, views: ViewsDep, limit: Annotated[int, Query(ge=1, le=500)] = 20) -> list[RunSummary]:
    _source_or_404(views, source)
    return views.runs(source, limit)


@api.get("/sources/{source}/runs/{run_id}/progress", summary="One run's progress, rate and ETA",
         dependencies=[Depends(requires_source_dag_read)])
def run_progress(source: str, run_id: str, views: ViewsDep) -> RunProgressView:
    _source_or_404(views, source)
    return views.run_progress(source, run_id)


@api.get("/sources/{source}/runs/{run_id}/records",
         summary="One run's outcome, first records and dead letters (each rejection linked to its evidence)",
         dependencies=[Depends(requires_source_dag_read)])
def run_records(source: str, run_id: str, views: ViewsDep,
                limit: Annotated[int, Query(ge=1, le=500)] = 20) -> RunRecordsView:
    _source_or_404(views, source)
    return views.run_records(source, run_id, limit)


@api.get("/dag-runs/{dag_id}/{dag_run_id}/progress", dependencies=[Depends(requires_access_dag("GET"))],
         summary="The progress of the harvest run an Airflow dag run works on (the Harvest progress tab)")
def dag_run_progress(dag_id: str, dag_run_id: str, views: ViewsDep) -> RunProgressView:
    if not dag_id.startswith(DAG_ID_PREFIX):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{dag_id} is not a harvest DAG")
    source = dag_id.removeprefix(DAG_ID_PREFIX)
    _source_or_404(views, source)
    run_id = views.harvest_run_of(source, dag_run_id)
    if run_id is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{dag_run_id} has not planned a harvest run yet")
    return views.run_progress(source, run_id)


@api.get("/slots", summary="Page slots per country and state, proxy bytes per country, each pool's proxies, the last "
                           "allocation")
def page_slots(views: ViewsDep) -> SlotsView:
    return views.slots()


@api.get("/sources/{source}/dead-letters", summary="Dead letters of a source with their reasons, oldest first",
         dependencies=[Depends(requires_source_dag_read)])
def dead_letters(source: str, views: ViewsDep, start: Annotated[int, Query(ge=0)] = 0,
                 limit: Annotated[int, Query(ge=1, le=500)] = 100) -> DeadLettersView:
    return views.dead_letters(source, start, limit)


# A page we harvested is a stranger's HTML: shown sandboxed (its own origin, no script, no request leaves it).
SNAPSHOT_HEADERS = {"Content-Security-Policy": "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'",
                    "X-Content-Type-Options": "nosniff", "Cache-Control": "private, max-age=60"}


def _snapshot_or_404(views: HarvestViews, source: str, task_id: str) -> PageSnapshot:
    _source_or_404(views, source)
    snapshot = views.snapshot(source, task_id)
    if snapshot is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no snapshot of task {task_id!r} of {source!r}")
    return snapshot


@api.get("/sources/{source}/dead-letters/{task_id}/snapshot", response_class=HTMLResponse,
         summary="The HTML of a failed or rejected browser page, as it was (shown sandboxed: no scripts run)",
         dependencies=[Depends(requires_source_dag_read)])
def dead_letter_snapshot(source: str, task_id: str, views: ViewsDep) -> HTMLResponse:
    return HTMLResponse(_snapshot_or_404(views, source, task_id).html, headers=SNAPSHOT_HEADERS)


@api.get("/sources/{source}/dead-letters/{task_id}/screenshot", response_class=Response,
         summary="A screenshot (JPEG) of a failed or rejected browser page",
         dependencies=[Depends(requires_source_dag_read)])
def dead_letter_screenshot(source: str, task_id: str, views: ViewsDep) -> Response:
    snapshot = _snapshot_or_404(views, source, task_id)
    if snapshot.screenshot is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"the snapshot of task {task_id!r} has no screenshot")
    return Response(snapshot.screenshot, media_type="image/jpeg", headers=SNAPSHOT_HEADERS)


@api.post("/sources/{source}/dead-letters/requeue",
          dependencies=[Depends(requires_source_dag_edit), Depends(requires_explicit_request)],
          summary="Put dead letters back in intake (oldest first); needs edit access to harvest_<source> and a "
                  "bearer token or the X-Harvester-Request header")
def requeue_dead_letters(source: str, views: ViewsDep,
                         limit: Annotated[int | None, Query(ge=1)] = None) -> RequeueResult:
    return views.requeue(source, limit)


GONE_QUERY = "true: only records of gone items (gone_at set); false: only items still there"


@api.get("/results/{source}", summary="The source's records, a page at a time (cursor), by run or harvest time",
         dependencies=[Depends(requires_source_dag_read)])
def results(source: str, views: ViewsDep, cursor: str | None = None,
            limit: Annotated[int, Query(ge=1, le=500)] = 50, run_id: str | None = None,
            harvested_after: Annotated[datetime | None, Query(description="harvested_at >= this")] = None,
            harvested_before: Annotated[datetime | None, Query(description="harvested_at < this")] = None,
            gone: Annotated[bool | None, Query(description=GONE_QUERY)] = None,
            ) -> ResultsPage:
    _source_or_404(views, source)
    try:
        return views.results(source, cursor, limit, run_id, harvested_after, harvested_before, gone)
    except ValueError as error:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(error)) from None


@api.get("/results/{source}/export",
         summary="The source's records as a download: jsonl, csv or parquet, by run, since a time, changed only",
         response_class=FileResponse, dependencies=[Depends(requires_source_dag_read)])
def export_results(source: str, views: ViewsDep,
                   format: Annotated[Literal["jsonl", "csv", "parquet"], Query()] = "jsonl",
                   run_id: str | None = None,
                   since: Annotated[datetime | None, Query(description="harvested_at >= this")] = None,
                   changed_only: bool = False,
                   gone: Annotated[bool | None, Query(description=GONE_QUERY)] = None,
                   csv_formulas: Annotated[Literal["escaped", "raw"], Query(
                       description="CSV: text cells beginning with = + - @ TAB or CR get a ' first (escaped), "
                                   "or are written as harvested (raw)")] = "escaped") -> FileResponse:
    """The same records and formats as ``harvester export``, with the results route's access."""
    _source_or_404(views, source)
    from harvester.storage import MEDIA_TYPES

    path, count = views.export(source, format, run_id, since, changed_only, gone, csv_formulas == "escaped")
    name = f"{source}{'-' + run_id if run_id else ''}.{format}"
    cleanup = BackgroundTasks()
    cleanup.add_task(Path(path).unlink, missing_ok=True)  # once the file is sent
    return FileResponse(path, media_type=MEDIA_TYPES[format], filename=name,
                        headers={"X-Harvester-Records": str(count)}, background=cleanup)


@api.post("/jobs", status_code=status.HTTP_201_CREATED, dependencies=[Depends(requires_explicit_request)],
          summary="Harvest these URLs now: triggers harvest_<source> with them as its urls param")
def create_job(job: JobRequest, request: Request, user: GetUserDep, views: ViewsDep) -> JobResponse:
    dag_id = dag_id_for(job.source)
    requires_access_dag("POST", DagAccessEntity.RUN, param_dag_id=dag_id)(request, user)
    _source_or_404(views, job.source)
    bad = [url for url in job.urls if not url.startswith(("http://", "https://"))]
    if bad:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"not http(s) URLs: {bad[:5]}")
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.exceptions import DagNotFound
    from airflow.utils.types import DagRunTriggeredByType

    try:
        run = trigger_dag(dag_id, triggered_by=DagRunTriggeredByType.REST_API, conf={"urls": job.urls},
                          triggering_user_name=user.get_name())
    except DagNotFound:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{dag_id} is not parsed yet") from None
    if run is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"{dag_id} did not start a run")
    return JobResponse(dag_id=dag_id, dag_run_id=run.run_id, urls=len(job.urls))


# -- the pages --------------------------------------------------------------------------------------------
pages = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(requires_authenticated())])


@pages.get("/", response_class=HTMLResponse)
def harvester_page() -> HTMLResponse:
    return HTMLResponse((STATIC_DIRECTORY / "harvester.html").read_text())


@pages.get("/run", response_class=HTMLResponse)
def harvest_progress_page() -> HTMLResponse:
    return HTMLResponse((STATIC_DIRECTORY / "run.html").read_text())


protected = APIRouter(include_in_schema=False, dependencies=[Depends(requires_authenticated())])


@protected.get("/static/{name}")
def static_file(name: str) -> FileResponse:
    """The pages' scripts, styles and icon, behind a login like the rest (only the files shipped here)."""
    if name not in STATIC_FILES:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no static file {name!r}")
    return FileResponse(STATIC_DIRECTORY / name)


@protected.get("/openapi.json")
def openapi_schema(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


def create_app() -> FastAPI:
    app = FastAPI(title="Harvester", version="1", docs_url=None, redoc_url=None, openapi_url=None, description=(
        "The operators' view of Harvester: sources, runs and their progress, page slots, dead letters, "
        "results and jobs. Every route needs an Airflow session or token; reads of a source need read "
        "access to its DAG; changes need access to the source's DAG and a bearer token or the "
        "X-Harvester-Request header."))
    app.include_router(api)
    app.include_router(pages)
    app.include_router(protected)
    return app


app = create_app()


class HarvesterPlugin(AirflowPlugin):
    """Registers the app under /harvester and its two views in the Airflow UI."""

    name = "harvester"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Harvester"}]
    external_views = [
        {"name": "Harvester", "href": f"{RELATIVE_PREFIX}/ui/", "destination": "nav", "url_route": "harvester",
         "icon": f"{RELATIVE_PREFIX}/static/icon.svg", "nav_top_level": True},
        {"name": "Harvest progress", "href": f"{RELATIVE_PREFIX}/ui/run?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
         "destination": "dag_run", "url_route": "harvest-progress"},
    ]
