"""docker-compose.yaml cannot run here (no Docker engine): check it is consistent with the repository."""

from __future__ import annotations

import importlib
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from harvester.cli import build_parser
from harvester.settings import REPOSITORY_ROOT
from harvester.workers.celery_app import declared_queues

pytestmark = pytest.mark.unit

COMPOSE_TEXT = (REPOSITORY_ROOT / "docker-compose.yaml").read_text()
COMPOSE = yaml.safe_load(COMPOSE_TEXT)
SERVICES: dict[str, dict] = COMPOSE["services"]
HARVESTER_SERVICES = ("worker-priority", "worker-default", "worker-pageslots", "distributor", "flower", "demo-site")
CELERY_WORKERS = {"airflow-worker": "celery", "worker-priority": "priority", "worker-default": "default",
                  "worker-pageslots": "pageslots"}
# What only Airflow's own services may see: the metadata database, its encryption and signing keys, Mongo's root.
AIRFLOW_ONLY_SECRETS = ("POSTGRES_PASSWORD", "AIRFLOW_FERNET_KEY", "AIRFLOW_API_SECRET_KEY", "AIRFLOW_JWT_SECRET",
                        "MONGO_ROOT_PASSWORD", "AIRFLOW_ADMIN_PASSWORD")


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} with ``env`` (unset: the default, or "")."""
    env = env or {}

    def one(match: re.Match[str]) -> str:
        name, operator, word = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        return word if operator == ":-" else ""

    return re.sub(r"\$\{([A-Z_]+)(?:(:-|:\?)([^}]*))?\}", one, value).replace("$$", "$")


def env_example() -> dict[str, str]:
    """.env.example as docker compose reads it: KEY=value, a " #" starting a comment."""
    values = {}
    for line in (REPOSITORY_ROOT / ".env.example").read_text().splitlines():
        if re.match(r"^[A-Z_]+=", line):
            key, _, value = line.partition("=")
            values[key] = re.split(r"\s+#", value, maxsplit=1)[0].strip()
    return values


def memory_bytes(value: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)b?", str(value).lower()).groups()
    return float(number) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[unit]


def seconds(duration: str) -> float:
    """A compose duration such as 1m30s."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[u] for n, u in parts)


def strings(node: object) -> list[str]:
    """Every string value in a parsed YAML document."""
    if isinstance(node, dict):
        return [text for value in node.values() for text in strings(value)]
    if isinstance(node, list):
        return [text for value in node for text in strings(value)]
    return [node] if isinstance(node, str) else []


def environment_text(name: str) -> str:
    return " ".join(f"{key}={value}" for key, value in (SERVICES[name].get("environment") or {}).items())


def harvester_subcommands() -> set[str]:
    parser = build_parser()
    subparsers = next(action for action in parser._actions if action.dest == "command")
    return set(subparsers.choices)


def test_every_production_service_is_declared() -> None:
    expected = {
        "postgres", "redis", "mongo", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
        "airflow-triggerer", "worker-priority", "worker-default", "worker-pageslots", "distributor", "demo-site",
    }
    assert expected <= set(SERVICES)
    assert SERVICES["mongo"]["image"] == "mongo:8.0"
    assert "healthcheck" in SERVICES["mongo"] and SERVICES["mongo"]["volumes"]
    assert "--appendonly" in SERVICES["redis"]["command"]


def test_airflow_runs_the_celery_executor_on_postgres() -> None:
    environment = SERVICES["airflow-scheduler"]["environment"]
    assert environment["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert environment["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
    # Airflow's Celery queues must not share a Redis database with Harvester's "default" queue.
    assert environment["AIRFLOW__CELERY__BROKER_URL"].rsplit("/", 1)[1] != environment[
        "HARVESTER_REDIS_URL"].rsplit("/", 1)[1]


def worker_command(name: str) -> list[str]:
    """A worker's argv; a `bash -c` command is split as the shell would (compose's $$ is a literal $)."""
    command = SERVICES[name]["command"]
    if command[:2] == ["bash", "-c"]:
        command = shlex.split(command[2].replace("$$", "$"))
        assert command[0] == "exec"
        command = command[1:]
    return command


def test_worker_services_consume_declared_queues_of_the_one_celery_app() -> None:
    declared = {queue.name for queue in declared_queues()}
    for name in ("worker-priority", "worker-default", "worker-pageslots"):
        command = worker_command(name)
        assert command[0] == "celery"
        app_module = command[command.index("-A") + 1]
        assert hasattr(importlib.import_module(app_module), "app")
        assert command[command.index("-Q") + 1] in declared


def test_pageslots_worker_hosts_20_long_lived_page_slots_on_a_16_cpu_host() -> None:
    """Seed 000: about 20 page slots on 16 CPUs; each prefork child keeps its own browser across tasks."""
    service = SERVICES["worker-pageslots"]
    command = worker_command("worker-pageslots")
    assert command[command.index("-Q") + 1] == "pageslots"
    assert command[command.index("--pool") + 1] == "prefork"
    assert interpolate(command[command.index("--concurrency") + 1]) == "20"
    limits = service["deploy"]["resources"]["limits"]
    assert float(limits["cpus"]) == 16
    assert memory_bytes(limits["memory"]) >= 20 * 2**30 * 0.5  # at least half a GB per slot
    assert memory_bytes(service["shm_size"]) >= 2**30


def test_harvester_commands_exist() -> None:
    command = SERVICES["distributor"]["command"]
    assert command[0] == "harvester"
    assert command[1] in harvester_subcommands(), f"distributor: `harvester {command[1]}` does not exist"
    demo = SERVICES["demo-site"]["command"]
    scripts = tomllib.loads((REPOSITORY_ROOT / "demo" / "pyproject.toml").read_text())["project"]["scripts"]
    assert demo[0] in scripts, "demo-site: not a console script of the demo package (demo/pyproject.toml)"


def dockerfile_stages() -> tuple[dict[str, str], str]:
    """Each stage of the Dockerfile with what it and the stages it is built FROM do; and the last stage."""
    own: dict[str, str] = {}
    bases: dict[str, str] = {}
    name = ""
    for line in (REPOSITORY_ROOT / "Dockerfile").read_text().splitlines():
        if found := re.match(r"FROM\s+(\S+)\s+AS\s+(\S+)", line, flags=re.IGNORECASE):
            name = found.group(2)
            bases[name], own[name] = found.group(1), ""
        own[name] = own.get(name, "") + line + "\n"

    def text(stage: str) -> str:
        return own[stage] + (text(bases[stage]) if bases.get(stage) in own else "")

    return {stage: text(stage) for stage in own}, name


def test_production_images_do_not_install_the_demo_site() -> None:
    """The demo site's package (demo/) is only in the stage compose's demo-site service builds."""
    stages, last = dockerfile_stages()
    installs_demo = {stage for stage, text in stages.items() if re.search(r"^COPY .*\bdemo\b", text, re.MULTILINE)}
    assert installs_demo == {"demo"}, installs_demo
    assert last not in installs_demo, "a plain `docker build .` must make the production image"
    for name, service in SERVICES.items():
        build = service.get("build")
        if build is None:
            continue
        assert isinstance(build, dict) and build["target"] in stages, f"{name}: build a named stage"
        assert (build["target"] in installs_demo) == (name == "demo-site"), f"{name} builds {build['target']}"
    assert SERVICES["demo-site"]["image"] != SERVICES["worker-default"]["image"]


def test_secrets_come_from_env_example_and_none_has_a_value_there() -> None:
    referenced = set(re.findall(r"(?<!\$)\$\{([A-Z_]+)", COMPOSE_TEXT))  # $${X} is the container's own
    example = env_example()
    assert referenced <= set(example), f"missing from .env.example: {referenced - set(example)}"
    required = set(re.findall(r"\$\{([A-Z_]+):\?", COMPOSE_TEXT))
    for key in required:
        assert example[key] == "", f"{key} is required: .env.example must leave it empty, not ship a default"
    for key in example:
        if any(word in key for word in ("PASSWORD", "SECRET", "FERNET", "BASIC_AUTH")):
            assert key in required, f"{key} is a secret: compose must refuse to start without it (${{{key}:?...}})"


def test_image_extends_airflow_and_installs_the_same_lock() -> None:
    dockerfile = (REPOSITORY_ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM apache/airflow:3\.3\.2", dockerfile, flags=re.MULTILINE)
    assert "-c /opt/harvester/requirements.lock" in dockerfile
    assert "playwright install" in dockerfile and "chromium" in dockerfile
    assert "include" in dockerfile
    for path in ("requirements.txt", "requirements.lock", "include/pyproject.toml"):
        assert Path(REPOSITORY_ROOT / path).exists()
    lock = (REPOSITORY_ROOT / "requirements.lock").read_text()
    assert "apache-airflow==3.3.2" in lock and "celery==5.6.3" in lock


# -- properties of the official Airflow compose, and hardening -----------------------------------------


def test_every_long_running_service_has_a_healthcheck() -> None:
    for name, service in SERVICES.items():
        if service.get("restart") == "no":  # one-shot: airflow-init, demo-sources
            continue
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    assert "8974/health" in str(SERVICES["airflow-scheduler"]["healthcheck"]["test"])
    assert SERVICES["airflow-scheduler"]["environment"]["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "True"
    for name, job in (("airflow-dag-processor", "DagProcessorJob"), ("airflow-triggerer", "TriggererJob")):
        assert f"airflow jobs check --job-type {job}" in str(SERVICES[name]["healthcheck"]["test"])


def test_celery_workers_are_pinged_by_their_own_node_name() -> None:
    for name, node in CELERY_WORKERS.items():
        test = " ".join(SERVICES[name]["healthcheck"]["test"][1:])
        assert "inspect ping" in test and f'-d "{node}@$${{HOSTNAME}}"' in test, name
        if name != "airflow-worker":
            assert f"-n {node}@%h" in " ".join(worker_command(name)), f"{name}: the ping names another node"
            assert "-A harvester.workers.celery_app" in test


def test_the_distributor_healthcheck_is_the_harvester_liveness_command() -> None:
    test = SERVICES["distributor"]["healthcheck"]["test"]
    assert test[:4] == ["CMD", "harvester", "health", "distributor"]
    assert "health" in harvester_subcommands()
    max_age = float(test[test.index("--max-age") + 1])
    from harvester.distributor.service import HEARTBEAT_SECONDS, MAX_WAIT_SECONDS

    assert max_age > MAX_WAIT_SECONDS + HEARTBEAT_SECONDS, "an idle distributor would be reported dead"


def test_celery_workers_shut_down_warm() -> None:
    for name in CELERY_WORKERS:
        assert SERVICES[name]["environment"]["DUMB_INIT_SETSID"] == "0", name
    for name in HARVESTER_SERVICES:  # not through Airflow's entrypoint, which runs `airflow <command>`
        assert SERVICES[name]["entrypoint"] == ["/usr/bin/dumb-init", "--"], name


def test_stop_grace_periods_outlast_the_longest_batch() -> None:
    from harvester.config.loader import load_sources
    from harvester.settings import HarvesterSettings

    settings = HarvesterSettings()
    sources = load_sources(REPOSITORY_ROOT / "include" / "sources").sources.values()
    http = max(source.timeout for source in sources if source.render == "http")
    browser = max(source.timeout for source in sources if source.render == "browser")
    # an HTTP batch fetches concurrently (BatchRunner.batch_deadline); a browser batch page after page
    longest = {"worker-priority": http + 2 * settings.lease_seconds,
               "worker-default": http + 2 * settings.lease_seconds,
               "worker-pageslots": settings.publish_batch_size * browser + 2 * settings.lease_seconds}
    for name, batch_seconds in longest.items():
        assert seconds(SERVICES[name]["stop_grace_period"]) > batch_seconds, name
    assert seconds(SERVICES["airflow-worker"]["stop_grace_period"]) >= 60


def test_task_logs_are_one_volume_shared_by_the_airflow_services() -> None:
    assert "airflow-logs" in COMPOSE["volumes"]
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-triggerer", "airflow-worker",
                 "airflow-dag-processor"):
        assert "airflow-logs:/opt/airflow/logs" in SERVICES[name]["volumes"], name
    for name in ("airflow-worker", "airflow-triggerer"):  # the api-server reads the volume, not their log servers
        assert "--skip-serve-logs" in SERVICES[name]["command"], name


def test_flower_and_the_demo_site_run_only_when_their_profile_is_asked_for() -> None:
    assert SERVICES["flower"]["profiles"] == ["flower"]
    assert SERVICES["demo-site"]["profiles"] == ["demo"]
    flower = SERVICES["flower"]["command"]
    assert flower[:3] == ["celery", "-A", "harvester.workers.celery_app"] and "flower" in flower
    for name, service in SERVICES.items():
        if "profiles" not in service:
            assert "demo-site" not in (service.get("depends_on") or {}), f"{name} needs the demo profile"
    assert not SERVICES["demo-site"]["environment"], "the demo site needs no secret"


def test_the_fernet_key_and_every_secret_are_required() -> None:
    environment = SERVICES["airflow-scheduler"]["environment"]
    assert environment["AIRFLOW__CORE__FERNET_KEY"].startswith("${AIRFLOW_FERNET_KEY:?")
    for key in (*AIRFLOW_ONLY_SECRETS, "REDIS_PASSWORD", "HARVESTER_MONGO_PASSWORD"):
        assert f"${{{key}:?" in COMPOSE_TEXT, f"{key} may be empty"


def test_redis_has_a_password_and_every_client_url_carries_it() -> None:
    command = SERVICES["redis"]["command"]
    assert command[command.index("--requirepass") + 1] == "${REDIS_PASSWORD}"
    assert SERVICES["redis"]["environment"]["REDISCLI_AUTH"] == "${REDIS_PASSWORD}"  # for the healthcheck
    urls = [value for value in strings(COMPOSE) if "redis://" in value]
    assert len(urls) >= 4
    for url in urls:  # a connection's extras may name the sentinels and their password (the same secret)
        assert re.fullmatch(r"redis://:\$\{REDIS_PASSWORD(:\?[^}]*)?\}@redis:6379/\d(\?sentinels=[^&]+&sentinel_master="
                            r"harvester&sentinel_password=\$\{REDIS_PASSWORD\})?", url), url
    for urls in (value for value in strings(COMPOSE) if "sentinel://" in value):
        for url in urls.split(";"):
            assert re.fullmatch(r"sentinel://:\$\{REDIS_PASSWORD\}@redis-sentinel-\d:26379/1", url), url


def test_the_ui_needs_a_login_from_a_persisted_passwords_file() -> None:
    environment = SERVICES["airflow-apiserver"]["environment"]
    assert environment["AIRFLOW__CORE__AUTH_MANAGER"].endswith("SimpleAuthManager")
    assert environment["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] == "False"
    passwords = environment["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
    directory = passwords.rsplit("/", 1)[0]
    for name in ("airflow-apiserver", "airflow-init"):
        assert f"airflow-auth:{directory}" in SERVICES[name]["volumes"], name
    assert "airflow-auth" in COMPOSE["volumes"]
    init = "\n".join(SERVICES["airflow-init"]["command"])
    assert passwords in init and "AIRFLOW_ADMIN_PASSWORD" in init
    users = environment["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
    assert interpolate(users) == "admin:admin"
    for name, service in SERVICES.items():  # only the UI reads the passwords
        if name not in ("airflow-apiserver", "airflow-init"):
            assert "airflow-auth:" not in str(service.get("volumes", [])), name


def test_published_ports_bind_loopback_by_default() -> None:
    published = [(name, port) for name, service in SERVICES.items() for port in service.get("ports", [])]
    assert {name for name, _ in published} == {"airflow-apiserver", "flower", "prometheus", "grafana"}
    for name, port in published:
        assert interpolate(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def test_harvester_services_get_only_the_variables_they_need() -> None:
    for name in HARVESTER_SERVICES:
        text = environment_text(name)
        for secret in AIRFLOW_ONLY_SECRETS:
            assert secret not in text, f"{name} sees {secret}"
        assert not any(key.startswith("AIRFLOW__") for key in SERVICES[name].get("environment") or {}), name
        assert "/opt/airflow/logs" not in str(SERVICES[name].get("volumes", [])), name
    redis_only = {"HARVESTER_REDIS_URL", "AIRFLOW_CONN_REDIS_DEFAULT", "HARVESTER_REDIS_SENTINELS",
                  "HARVESTER_REDIS_SENTINEL_MASTER", "HARVESTER_REDIS_SENTINEL_PASSWORD"}
    # the distributor also serves the Prometheus collector, which needs nothing but Redis
    metrics = {"HARVESTER_METRICS_PORT", "HARVESTER_METRICS_HOST"}
    assert set(SERVICES["distributor"]["environment"]) == {*redis_only, *metrics}
    assert set(SERVICES["flower"]["environment"]) == {*redis_only, "FLOWER_BASIC_AUTH"}
    # Harvester connects to Mongo as the application user, never as root
    assert "MONGO_ROOT" not in str(yaml.safe_load(COMPOSE_TEXT)["x-mongo-uri"])
    assert SERVICES["worker-default"]["environment"]["HARVESTER_MONGO_URI"].startswith(
        "mongodb://${HARVESTER_MONGO_USER:-harvester}:${HARVESTER_MONGO_PASSWORD")
    # and the Airflow services do not need Mongo's root either
    assert "MONGO_ROOT" not in environment_text("airflow-worker")


def test_the_mongo_application_user_is_created_with_read_write_on_harvester_only() -> None:
    mongo = SERVICES["mongo"]
    assert "./deploy/mongo:/docker-entrypoint-initdb.d:ro" in mongo["volumes"]
    script = (REPOSITORY_ROOT / "deploy" / "mongo" / "create-harvester-user.js").read_text()
    assert "process.env.HARVESTER_MONGO_PASSWORD" in script
    assert re.search(r'roles:\s*\[\{\s*role:\s*"readWrite",\s*db:\s*"harvester"\s*\}\]', script)
    assert {"HARVESTER_MONGO_USER", "HARVESTER_MONGO_PASSWORD"} <= set(mongo["environment"])


def test_chromium_runs_in_its_own_sandbox_as_a_non_root_user() -> None:
    import json

    from harvester.settings import HarvesterSettings

    service = SERVICES["worker-pageslots"]
    assert interpolate(service["environment"]["HARVESTER_CHROMIUM_SANDBOX"]) == "true"
    assert HarvesterSettings(chromium_sandbox="true").chromium_sandbox is True  # the variable is read
    assert interpolate(service["user"]).split(":")[0] not in ("0", "root")
    assert "no-new-privileges:true" in service["security_opt"]
    assert service["cap_drop"] == ["ALL"]
    [seccomp] = [option.split("=", 1)[1] for option in service["security_opt"] if option.startswith("seccomp=")]
    profile = json.loads((REPOSITORY_ROOT / seccomp).read_text())
    denied = {name for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ERRNO" for name in rule["names"]}
    # the namespace sandbox needs these; the syscalls Docker's default profile refuses stay refused
    assert not denied & {"clone", "unshare", "setns"}
    assert {"mount", "ptrace", "bpf", "kexec_load", "init_module", "keyctl", "userfaultfd"} <= denied
    from harvester.scraping.browser import page_load as browser

    assert "--no-sandbox" not in browser.CHROMIUM_ARGS  # Playwright adds it only when the sandbox is off


def test_a_compose_yaml_that_breaks_a_property_fails_its_test() -> None:
    """The checks above read the file: a copy with Redis's password removed no longer passes."""
    global COMPOSE, SERVICES
    saved = COMPOSE, SERVICES
    try:
        COMPOSE = yaml.safe_load(COMPOSE_TEXT.replace(":${REDIS_PASSWORD}@", "@"))
        SERVICES = COMPOSE["services"]
        with pytest.raises(AssertionError):
            test_redis_has_a_password_and_every_client_url_carries_it()
    finally:
        COMPOSE, SERVICES = saved


def test_prometheus_scrapes_the_distributor_and_grafana_is_provisioned() -> None:
    prometheus = SERVICES["prometheus"]
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus["volumes"]
    scrape = yaml.safe_load((REPOSITORY_ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    port = SERVICES["distributor"]["environment"]["HARVESTER_METRICS_PORT"]
    targets = [target for job in scrape["scrape_configs"] for config in job["static_configs"]
               for target in config["targets"]]
    assert f"distributor:{port}" in targets
    grafana = SERVICES["grafana"]
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    assert (REPOSITORY_ROOT / "deploy" / "grafana" / "dashboards" / "harvester.json").is_file()
    assert "?" in grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"]  # required, never a default password


SENTINELS = ("redis-sentinel-1", "redis-sentinel-2", "redis-sentinel-3")


def test_redis_fails_over_through_a_replica_and_three_sentinels_every_client_asks() -> None:
    """The compose side of the cluster mode's Sentinel topology (harvester.services.cluster): a replica of
    the primary, three sentinels (quorum 2) that announce names, and every Redis client pointed at them."""
    replica = SERVICES["redis-replica"]["command"]
    assert replica[replica.index("--replicaof") + 1:replica.index("--replicaof") + 3] == ["redis", "6379"]
    assert replica[replica.index("--masterauth") + 1] == "${REDIS_PASSWORD}"
    assert "--masterauth" in SERVICES["redis"]["command"]  # it may come back as a replica of the new primary
    volumes = set()
    for name in SENTINELS:
        sentinel = SERVICES[name]
        assert sentinel["environment"]["SENTINEL_NAME"] == name
        assert "get-master-addr-by-name harvester" in str(sentinel["healthcheck"]["test"])
        volumes |= set(sentinel["volumes"])
    assert len(volumes) == 3  # each its own sentinel.conf
    sentinels = COMPOSE["x-redis-sentinels"]
    assert sentinels.split(",") == [f"{name}:26379" for name in SENTINELS]
    for name in ("worker-priority", "worker-default", "worker-pageslots", "distributor", "flower", "airflow-worker",
                 "airflow-scheduler"):
        environment = SERVICES[name]["environment"]
        assert environment["HARVESTER_REDIS_SENTINELS"] == sentinels, name
        assert environment["HARVESTER_REDIS_SENTINEL_MASTER"] == "harvester", name
        assert set(SENTINELS) <= set(SERVICES[name]["depends_on"]), name
    scheduler = SERVICES["airflow-scheduler"]["environment"]
    assert scheduler["AIRFLOW__CELERY__BROKER_URL"].count("sentinel://") == 3
    assert scheduler["AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__MASTER_NAME"] == "harvester"
    assert json.loads(interpolate(scheduler["AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__SENTINEL_KWARGS"],
                                  {"REDIS_PASSWORD": "pw"})) == {"password": "pw"}


def test_a_compose_sentinel_writes_the_configuration_redis_sentinel_reads(tmp_path: Path) -> None:
    """The sentinel's shell command run for real (up to its exec): the file it writes, as a sentinel reads it."""
    import subprocess

    script = SERVICES["redis-sentinel-2"]["command"][2].replace("/data/", f"{tmp_path}/").replace("$$", "$")
    script = script.replace("exec redis-sentinel", "echo would start")
    environment = {"PATH": "/usr/bin:/bin", **{key: interpolate(value, {"REDIS_PASSWORD": "s3cret"})
                                                for key, value in SERVICES["redis-sentinel-2"]["environment"].items()}}
    for _ in range(2):  # the second start keeps the file the sentinel rewrote
        subprocess.run(["sh", "-c", script], env=environment, check=True, capture_output=True)
    lines = (tmp_path / "sentinel.conf").read_text().splitlines()
    assert lines.count("sentinel monitor harvester redis 6379 2") == 1
    assert {"sentinel auth-pass harvester s3cret", "requirepass s3cret", "sentinel announce-ip redis-sentinel-2",
            "sentinel resolve-hostnames yes", "sentinel announce-hostnames yes", "port 26379"} <= set(lines)


def test_a_metadata_cleanup_service_runs_the_harvester_command_daily_where_airflow_reaches_its_database() -> None:
    service = SERVICES["metadata-cleanup"]
    command = service["command"]
    assert command[:2] == ["harvester", "metadata-cleanup"] and "metadata-cleanup" in harvester_subcommands()
    assert float(command[command.index("--every-hours") + 1]) == 24
    assert service["entrypoint"] == ["/usr/bin/dumb-init", "--"]  # not `airflow harvester ...`
    environment = service["environment"]
    assert environment["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == \
        SERVICES["airflow-scheduler"]["environment"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert interpolate(environment["HARVESTER_METADATA_RETENTION_DAYS"]) == "30"
    assert "airflow-init" in service["depends_on"]
