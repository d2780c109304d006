#!/usr/bin/env bash
# Install what is missing, and nothing twice: OS packages, .venv, the pinned lock, the harvester package
# (include/) and the demo site's package (demo/: what `make run` and the tests serve; never in production images).
# Used by `make run`, `make test` and CI. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '==> %s\n' "$*"; }
log_dir=var/log; mkdir -p "$log_dir"

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
# Redis Sentinel for the cluster mode and the failover test (they run `redis-server <conf> --sentinel`, which
# the plain binary does too; the package is what production hosts install).
command -v redis-sentinel >/dev/null 2>&1 || need_apt+=(redis-sentinel)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)  # the metrics tests scrape with a real one
command -v make >/dev/null 2>&1 || need_apt+=(make)
# PostgreSQL for `make run MODE=cluster` and the topology test (Debian keeps initdb off PATH).
command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need_apt+=(postgresql)
if [ ${#need_apt[@]} -gt 0 ]; then
  say "installing OS packages: ${need_apt[*]} (log: $log_dir/apt.log)"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo_cmd apt-get install -y "${need_apt[@]}" >>"$log_dir/apt.log" 2>&1; then
    $sudo_cmd apt-get update >>"$log_dir/apt.log" 2>&1
    $sudo_cmd apt-get install -y "${need_apt[@]}" >>"$log_dir/apt.log" 2>&1 \
      || { echo "!! apt-get install failed; see $log_dir/apt.log" >&2; exit 1; }
  fi
  # Debian starts its own redis-server on 6379 (and redis-sentinel on 26379) where an init system runs; ours
  # run on their own terms.
  # The same for PostgreSQL's main cluster on 5432 (the topology runs a private cluster of its own) and
  # for Prometheus on 9090 (the metrics tests start their own on a free port).
  for unit in redis-server redis-sentinel postgresql prometheus; do
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$unit" 2>/dev/null; then
      $sudo_cmd systemctl disable --now "$unit" >>"$log_dir/apt.log" 2>&1 || true
    fi
  done
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($python --version)"
  $python -m venv .venv
fi

stamp=.venv/.harvester-installed
# The checkout's path counts too: the editable installs point into it, so a venv another checkout
# installed into is re-pointed here.
lock_hash=$( (pwd; cat requirements.txt requirements-dev.txt requirements.lock include/pyproject.toml demo/pyproject.toml) | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_hash" ]; then
  say "installing Python packages from requirements.lock (log: $log_dir/pip.log)"
  .venv/bin/python -m pip install --quiet --upgrade pip >>"$log_dir/pip.log" 2>&1 || true
  # the runtime pins and the test tools (requirements-dev.txt includes requirements.txt); images take the runtime only
  .venv/bin/python -m pip install -r requirements-dev.txt -c requirements.lock >>"$log_dir/pip.log" 2>&1 \
    || { echo "!! pip install failed; see $log_dir/pip.log" >&2; exit 1; }
  .venv/bin/python -m pip install --no-deps -e include >>"$log_dir/pip.log" 2>&1 \
    || { echo "!! installing the harvester package failed; see $log_dir/pip.log" >&2; exit 1; }
  .venv/bin/python -m pip install --no-deps -e demo >>"$log_dir/pip.log" 2>&1 \
    || { echo "!! installing the demo site's package failed; see $log_dir/pip.log" >&2; exit 1; }
  echo "$lock_hash" > "$stamp"
else
  say "Python packages are up to date (.venv)"
fi
