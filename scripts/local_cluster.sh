#!/usr/bin/env bash
# A multi-machine set-up on one machine, all on 127.0.0.1: a PostgreSQL cluster, an MLflow server
# on it (runs in PostgreSQL, artifacts under a folder, served through the server), and a Ray head
# plus one worker node (two `ray start` processes).
#
#   bash scripts/local_cluster.sh up [DIR]      # start everything; prints the addresses, writes DIR/env
#   source DIR/env                              # RAY_ADDRESS, MLFLOW_TRACKING_URI, FEDBENCH_POSTGRES_URI
#   bash scripts/local_cluster.sh down [DIR]    # stop everything, remove DIR
#   bash scripts/local_cluster.sh stop|start postgres|mlflow|head|worker [DIR]   # one part (fault tests)
#
# DIR defaults to /tmp/fedbench-cluster (Ray's socket paths must stay short: keep DIR short). Ports
# are chosen free at `up` and kept in DIR/env, so `start` brings a part back on the same address.
# PYTHON (default python3) is the interpreter with fedbench, mlflow, psycopg2 and ray installed;
# every process inherits this shell's environment (PYTHONPATH included). PostgreSQL refuses to run
# as root: as root its processes run as the `postgres` user (Debian's package creates it).
set -euo pipefail

PYTHON=${PYTHON:-python3}
WAIT=${FEDBENCH_CLUSTER_WAIT:-120}   # seconds a part may take to come up
RAY_CPUS=${FEDBENCH_CLUSTER_CPUS:-1} # CPUs each Ray node offers

usage() { echo "usage: $0 up|down [DIR] | $0 start|stop postgres|mlflow|head|worker [DIR]" >&2; exit 2; }
die() { echo "local_cluster: $*" >&2; exit 1; }

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

pg_bin() {  # Debian puts PostgreSQL's server programs outside PATH
  local d; d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$d" ] || d=$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")
  [ -x "$d/initdb" ] || die "PostgreSQL's initdb not found (Debian: apt-get install postgresql)"
  echo "$d"
}

as_pg() {  # run a PostgreSQL program as a user it accepts
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || die "PostgreSQL refuses root and there is no 'postgres' user to run it as"
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

wait_for() {  # wait_for <what> <name> <command...>: poll the command until it succeeds, at most WAIT s,
  local what=$1 name=$2; shift 2  # and fail at once when the process group <name> has exited
  local t=0
  until "$@" >/dev/null 2>&1; do
    t=$((t + 1))
    if [ "$t" -ge $((WAIT * 2)) ] || ! kill -0 "$(cat "$DIR/$name.pid")" 2>/dev/null; then
      echo "local_cluster: $what did not come up ($t polls in ${WAIT} s at most); last lines of $DIR/$name.log:" >&2
      tail -n 30 "$DIR/$name.log" >&2 || true
      exit 1
    fi
    sleep 0.5
  done
}

http_ok() { "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2).read()' "$1"; }

start_bg() {  # start_bg <name> <command...>: a process group of its own, its pid in DIR/<name>.pid
  local name=$1; shift
  setsid "$@" >"$DIR/$name.log" 2>&1 < /dev/null &
  echo $! >"$DIR/$name.pid"
}

stop_bg() {  # stop a process group started by start_bg: TERM, then KILL after 20 s
  local pidfile="$DIR/$1.pid"
  [ -f "$pidfile" ] || return 0
  local pid; pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  kill -KILL -- "-$pid" 2>/dev/null || true  # whatever of the group is left (Ray's workers, uvicorn's)
  rm -f "$pidfile"
}

ray_node() {  # ray_node <name> <ray start arguments...>: one Ray node, kept by `ray start --block`
  local name=$1; shift
  start_bg "ray-$name" "$PYTHON" -m ray.scripts.scripts start --block --node-ip-address=127.0.0.1 \
    --num-cpus="$RAY_CPUS" --object-store-memory=100000000 --disable-usage-stats --temp-dir="$DIR/ray" \
    --node-manager-port="$(free_port)" --object-manager-port="$(free_port)" --metrics-export-port="$(free_port)" \
    --dashboard-agent-listen-port="$(free_port)" --dashboard-agent-grpc-port="$(free_port)" \
    --runtime-env-agent-port="$(free_port)" "$@"
}

nodes_alive() {  # the cluster has at least $1 live nodes
  "$PYTHON" - "$RAY_ADDRESS" "$1" <<'EOF'
import sys
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
alive = [n for n in ray.nodes() if n["Alive"]]
sys.exit(0 if len(alive) >= int(sys.argv[2]) else 1)
EOF
}

start_part() {
  # shellcheck disable=SC1091
  source "$DIR/env"
  case $1 in
    postgres)
      as_pg "$(pg_bin)/pg_ctl" -D "$DIR/pg" -l "$DIR/pg/server.log" -w -t "$WAIT" \
        -o "-h 127.0.0.1 -p $PG_PORT -k $DIR/pg" start >/dev/null ;;
    mlflow)
      # MLflow's job runner (GenAI jobs, a dozen worker processes) serves nothing fedbench records
      MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false start_bg mlflow "$PYTHON" -m mlflow server --backend-store-uri "$FEDBENCH_POSTGRES_URI" \
        --artifacts-destination "$DIR/artifacts" --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1
      wait_for "the MLflow server" mlflow http_ok "$MLFLOW_TRACKING_URI/health" ;;
    head)
      ray_node head --head --port="$RAY_PORT" --ray-client-server-port="$(free_port)" --include-dashboard=false \
        --dashboard-port="$(free_port)"
      wait_for "the Ray head" ray-head nodes_alive 1 ;;
    worker)
      ray_node worker --address="$RAY_ADDRESS"
      wait_for "the Ray worker node" ray-worker nodes_alive 2 ;;
    *) usage ;;
  esac
}

stop_part() {
  case $1 in
    postgres)
      [ -f "$DIR/pg/postmaster.pid" ] && as_pg "$(pg_bin)/pg_ctl" -D "$DIR/pg" -m fast -w -t 60 stop >/dev/null || true ;;
    mlflow) stop_bg mlflow ;;
    head|worker) stop_bg "ray-$1" ;;
    *) usage ;;
  esac
}

up() {
  [ ! -e "$DIR/env" ] || die "$DIR/env exists: a cluster is up there ($0 down $DIR first)"
  mkdir -p "$DIR/artifacts"
  chmod 755 "$DIR"  # the postgres user (as root) needs to reach DIR/pg
  cat >"$DIR/env" <<EOF
export PG_PORT=$(free_port) MLFLOW_PORT=$(free_port) RAY_PORT=$(free_port)
export FEDBENCH_POSTGRES_URI=postgresql+psycopg2://fedbench@127.0.0.1:\$PG_PORT/mlflow
export MLFLOW_TRACKING_URI=http://127.0.0.1:\$MLFLOW_PORT
export RAY_ADDRESS=127.0.0.1:\$RAY_PORT
EOF
  trap 'echo "local_cluster: up failed; stopping what started" >&2; down' EXIT
  mkdir -p "$DIR/pg"
  [ "$(id -u)" -ne 0 ] || chown postgres "$DIR/pg"
  as_pg "$(pg_bin)/initdb" -D "$DIR/pg" -U fedbench --auth=trust -E UTF8 >"$DIR/initdb.log" 2>&1 \
    || { tail -n 20 "$DIR/initdb.log" >&2; die "initdb failed"; }
  start_part postgres
  as_pg "$(pg_bin)/createdb" -h 127.0.0.1 -p "$PG_PORT" -U fedbench mlflow
  start_part mlflow
  start_part head
  start_part worker
  trap - EXIT
  echo "local cluster up in $DIR:"
  printf '  %s\n' "PostgreSQL     $FEDBENCH_POSTGRES_URI" "MLflow server  $MLFLOW_TRACKING_URI (artifacts in $DIR/artifacts)" \
    "Ray head       $RAY_ADDRESS, with one worker node" "source $DIR/env sets RAY_ADDRESS, MLFLOW_TRACKING_URI, FEDBENCH_POSTGRES_URI"
}

down() {
  [ -d "$DIR" ] || return 0
  for part in worker head mlflow postgres; do stop_part "$part"; done
  rm -rf "$DIR"
}

[ $# -ge 1 ] || usage
cmd=$1
case $cmd in
  up|down) DIR=${2:-/tmp/fedbench-cluster} ;;
  start|stop) [ $# -ge 2 ] || usage; DIR=${3:-/tmp/fedbench-cluster} ;;
  *) usage ;;
esac
DIR=$(mkdir -p "$DIR" && cd "$DIR" && pwd)
case $cmd in
  up) up ;;
  down) down ;;
  start) start_part "$2" ;;
  stop) stop_part "$2" ;;
esac
