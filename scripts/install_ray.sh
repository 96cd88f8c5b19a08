#!/usr/bin/env bash
# The Ray launcher: ray itself, then hydra-ray-launcher without its pins. hydra-ray-launcher 1.2.2
# pins cloudpickle==2.2.1, which joblib >= 1.5 (the joblib launcher) refuses; only its AWS launcher
# uses that cloudpickle, and `hydra/launcher=ray_cluster` (an existing cluster) never does.
#   bash scripts/install_ray.sh [EXTRA,...]   # more extras of fedbench, resolved with ray in one go
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e ".[ray${1:+,$1}]"
python3 -m pip install -q --no-deps 'hydra-ray-launcher>=1.2'
