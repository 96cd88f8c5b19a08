#!/usr/bin/env bash
# Installs fedbench with everything its tests use: the test, sweep and tuning extras, Ray and its
# launcher (scripts/install_ray.sh), PostgreSQL's driver for an MLflow server (`postgres`), the peer
# frameworks of scripts/bench_peers.py (`peers`: flwr, pfl), MkDocs for the documentation site
# (`docs`); and from Debian, where apt is available, Fashion-MNIST, PostgreSQL (the cluster tests
# start one: scripts/local_cluster.sh) and Chromium with its driver (the results page's browser
# test, through Selenium from the `test` extra). As root, the MLflow server's interpreter too
# (scripts/install_cluster_python.sh: the cluster tests then run the server unprivileged).
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v apt-get >/dev/null 2>&1; then
  wanted=()
  [ -d /usr/share/datasets/fashion-mnist ] || wanted+=(dataset-fashion-mnist)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || wanted+=(postgresql)
  # the MLflow server's own interpreter when the cluster runs as root (scripts/install_cluster_python.sh)
  /usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 || wanted+=(python3 python3-venv)
  # the results page's browser test (tests/tracking/test_results_page.py): headless Chromium and its driver
  command -v chromium >/dev/null 2>&1 || wanted+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || wanted+=(chromium-driver)
  if [ ${#wanted[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${wanted[@]}"
  fi
fi
bash scripts/install_ray.sh test,sweeps,tune,postgres,peers,docs
# as root, local_cluster.sh runs the MLflow server (and, in a test, Ray's nodes) as unprivileged users,
# which cannot run an interpreter under /root: a virtual environment of Debian's Python with the same
# mlflow and Ray
[ "$(id -u)" -ne 0 ] || PYTHON=python3 bash scripts/install_cluster_python.sh
# an editable install compiles nothing, and where PYTHONDONTWRITEBYTECODE is set (these machines) no process
# writes bytecode either: each process the tests start (~100 in the quick loop) would compile fedbench anew
# (0.25 s each); compiled once here, a changed module is still recompiled when imported
python3 -m compileall -q fedbench hydra_plugins tests >/dev/null
