#!/usr/bin/env bash
# Installs fedbench with its test extras, and Fashion-MNIST from Debian where apt is available.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v apt-get >/dev/null 2>&1 && [ ! -d /usr/share/datasets/fashion-mnist ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dataset-fashion-mnist
fi
python3 -m pip install -q -e '.[test,sweeps,tune]'
