#!/usr/bin/env bash
# An interpreter for the MLflow server of scripts/local_cluster.sh that an unprivileged user can run.
# Started as root, local_cluster.sh runs the server as a system user of its own (fedbench-mlflow),
# never as root; where the driver's interpreter is out of that user's reach (under /root, mode 700),
# the server runs from this virtual environment instead: Debian's /usr/bin/python3, root-owned and
# world-readable, with the SAME mlflow as the driver's (client and server talk HTTP only) and
# psycopg2-binary, from the package registry. Where the driver has Ray, the same Ray too: Ray's nodes,
# which root's `up` runs as FEDBENCH_RAY_USER, can run from it (FEDBENCH_RAY_PYTHON) the tasks that
# need Ray alone, as the cluster tests do; fedbench's jobs need fedbench and torch besides.
#
#   sudo bash scripts/install_cluster_python.sh [VENV]   # VENV defaults to /opt/fedbench-cluster
#
# PYTHON (default python3) is the driver's interpreter, whose mlflow version is matched. Running it
# again installs nothing when VENV already holds that version.
set -euo pipefail

VENV=${1:-/opt/fedbench-cluster}
PYTHON=${PYTHON:-python3}
BASE=${FEDBENCH_CLUSTER_BASE_PYTHON:-/usr/bin/python3}

die() { echo "install_cluster_python: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run it as root: the environment must be root-owned (no other user may change what the server runs)"
[ -x "$BASE" ] || die "$BASE not found (Debian: apt-get install python3 python3-venv)"
version_of() { "$1" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$2" 2>/dev/null || true; }
mlflow_version=$(version_of "$PYTHON" mlflow)
[ -n "$mlflow_version" ] || die "$PYTHON has no mlflow: install fedbench first (bash scripts/install_test_deps.sh), or set PYTHON"
psycopg2_version=$(version_of "$PYTHON" psycopg2-binary)
ray_version=$(version_of "$PYTHON" ray)  # none: no Ray in the environment either
what="mlflow $mlflow_version${ray_version:+, ray $ray_version} and psycopg2"

if [ -x "$VENV/bin/python" ] && [ "$(version_of "$VENV/bin/python" mlflow)" = "$mlflow_version" ] &&
    [ "$(version_of "$VENV/bin/python" ray)" = "$ray_version" ] && "$VENV/bin/python" -c 'import psycopg2' 2>/dev/null; then
  echo "install_cluster_python: $VENV already has $what"
  exit 0
fi
umask 022  # root-owned, readable and executable by every user, writable by root alone
"$BASE" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q "mlflow==$mlflow_version" "psycopg2-binary${psycopg2_version:+==$psycopg2_version}" \
  ${ray_version:+"ray[default]==$ray_version"}
"$VENV/bin/python" -c 'import mlflow, psycopg2' || die "$VENV cannot import mlflow and psycopg2 after the install"
echo "install_cluster_python: $VENV ($("$VENV/bin/python" -V)) has $what; local_cluster.sh up, run as root," \
  "uses it for the MLflow server${ray_version:+ (and for the Ray nodes, with FEDBENCH_RAY_PYTHON)}"
