"""docker-compose.yaml and the Dockerfile for production: the demo sources run only with the demo
profile, a forward proxy is asked for only for a country that has browser sources, HARVESTER_CONTACT_URL (named in
every request's User-Agent) is required, and the runtime image installs no test tool (requirements-dev.txt holds
them; one lock for both). Each failed on the code before the fix."""

from __future__ import annotations

import re

import pytest
import yaml
from harvester.config.loader import load_sources
from harvester.settings import REPOSITORY_ROOT

from tests.test_compose import COMPOSE_TEXT, SERVICES, dockerfile_stages, strings

pytestmark = pytest.mark.unit
SOURCES_VOLUME = "harvester-sources"
DEV_ONLY = ("pytest", "pytest-timeout", "hypothesis", "ruff", "secantusdb")


def environment(name: str) -> dict[str, str]:
    return {key: str(value) for key, value in (SERVICES[name].get("environment") or {}).items()}


def reads_sources(name: str) -> bool:
    return "HARVESTER_SOURCES_DIR" in environment(name) or name.startswith(("airflow-", "worker-"))


def test_the_demo_sources_run_only_with_the_demo_profile() -> None:
    """The image baked the demo sources in and compose ran them (unpaused) while the demo site is a profile."""
    stages, _ = dockerfile_stages()
    assert re.search(r"demo_\*\.yaml", stages["harvester"]), "the production stage must drop the demo sources"
    for name in SERVICES:
        if not reads_sources(name) or name == "airflow-init":
            continue
        env = environment(name)
        assert env.get("HARVESTER_SOURCES_DIR") == "/opt/airflow/sources", name
        mounts = [str(volume) for volume in SERVICES[name].get("volumes") or []]
        assert f"{SOURCES_VOLUME}:/opt/airflow/sources:ro" in mounts, (name, mounts)
    init = " ".join(strings(SERVICES["airflow-init"]["command"]))
    assert "demo_*.yaml" in init and "/opt/airflow/sources" in init  # the operator's sources, never the demo's
    demo = SERVICES["demo-sources"]
    assert demo["profiles"] == ["demo"]
    assert "demo_*.yaml" in " ".join(strings(demo["command"]))
    assert demo["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    assert f"{SOURCES_VOLUME}:/opt/airflow/sources" in [str(volume) for volume in demo["volumes"]]


def test_a_proxy_is_required_only_for_countries_with_browser_sources() -> None:
    """AIRFLOW_CONN_PROXY_SG was required with no browser source outside the demo."""
    sources = load_sources(REPOSITORY_ROOT / "include" / "sources").sources
    countries = {source.country for name, source in sources.items()
                 if source.render == "browser" and not name.startswith("demo_")}
    required = set(re.findall(r"\$\{AIRFLOW_CONN_PROXY_([A-Z]{2}):\?", COMPOSE_TEXT))
    assert required == countries, (required, countries)


def test_the_contact_url_is_required() -> None:
    assert re.search(r"HARVESTER_CONTACT_URL: \$\{HARVESTER_CONTACT_URL:\?", COMPOSE_TEXT)
    for name in ("worker-priority", "worker-default", "worker-pageslots", "airflow-worker"):
        assert "HARVESTER_CONTACT_URL" in environment(name), name


def pins(path: str) -> dict[str, str]:
    found = {}
    for line in (REPOSITORY_ROOT / path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            found[re.sub(r"\[.*\]", "", name).strip().lower().replace("_", "-")] = version.strip()
    return found


def test_the_runtime_image_installs_no_test_tool() -> None:
    runtime, dev = pins("requirements.txt"), pins("requirements-dev.txt")
    assert not set(DEV_ONLY) & set(runtime), set(DEV_ONLY) & set(runtime)
    assert set(DEV_ONLY) <= set(dev)
    assert (REPOSITORY_ROOT / "requirements-dev.txt").read_text().lstrip().startswith(("-r requirements.txt", "#"))
    assert "-r requirements.txt" in (REPOSITORY_ROOT / "requirements-dev.txt").read_text()
    lock = pins("requirements.lock")
    for name, version in {**runtime, **dev}.items():
        assert lock.get(name) == version, f"{name}=={version} is not in the one lock"
    dockerfile = (REPOSITORY_ROOT / "Dockerfile").read_text()
    instructions = [line for line in dockerfile.splitlines() if not line.lstrip().startswith("#")]
    assert not any("requirements-dev" in line for line in instructions)
    bootstrap = (REPOSITORY_ROOT / "scripts" / "bootstrap.sh").read_text()
    installs = [line for line in bootstrap.splitlines() if "pip install" in line and " -r " in line]
    assert any("-r requirements-dev.txt" in line for line in installs), installs
    assert yaml.safe_load(COMPOSE_TEXT)  # still valid YAML
