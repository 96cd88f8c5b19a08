#!/usr/bin/env bash
# A multi-machine set-up on one machine, all on 127.0.0.1: a PostgreSQL cluster, an MLflow server
# on it (runs in PostgreSQL, artifacts under a folder, served through the server), and a Ray head
# plus one worker node (two `ray start` processes).
#
#   bash scripts/local_cluster.sh up [DIR]      # start everything; prints the addresses, writes DIR/env
#   source DIR/env                              # RAY_ADDRESS, RAY_AUTH_*, MLFLOW_TRACKING_URI, FEDBENCH_POSTGRES_URI, PGPASSWORD
#   bash scripts/local_cluster.sh down [DIR]    # stop everything, remove DIR (only a DIR `up` made)
#   bash scripts/local_cluster.sh stop|start postgres|mlflow|head|worker [DIR]   # one part (fault tests)
#
# DIR defaults to /tmp/fedbench-cluster (Ray's socket paths must stay short: keep DIR short). Ports
# are chosen free at `up` and kept in DIR/env, so `start` brings a part back on the same address.
# PYTHON (default python3) is the interpreter with fedbench, mlflow, psycopg2 and ray installed;
# every process inherits this shell's environment (PYTHONPATH included) but the MLflow server as
# root (server_env). PostgreSQL refuses to run as root: as root its processes run as the `postgres`
# user (Debian's package creates it).
#
# Nothing listens beyond 127.0.0.1 (PostgreSQL, MLflow, every Ray part: see RAY_START). PostgreSQL
# asks for a password (scram-sha-256); `up` generates one for the superuser and one for the role
# `fedbench`, which owns the MLflow database and is no superuser; DIR/pg.admin keeps the first,
# DIR/env the second (both mode 600).
# Ray asks for a token (RAY_AUTH_MODE=token): `up` generates one into DIR/ray.token (mode 600), which
# every node and every driver that sources DIR/env reads through RAY_AUTH_TOKEN_PATH (never on a
# command line). As root, what other users reach over loopback runs unprivileged: PostgreSQL as
# `postgres`, the MLflow server as MLFLOW_USER (a system user `up` creates), from an interpreter that
# user can run (server_python), and Ray's nodes as RAY_USER (ray_user): the user whose jobs they run
# (FEDBENCH_RAY_USER, else sudo's SUDO_USER), from FEDBENCH_RAY_PYTHON (default PYTHON), with none of
# root's environment but what they need; DIR/env and DIR/ray.token are then that user's, for its
# drivers. Root's Ray is only FEDBENCH_RAY_USER=root, said out loud. Ray's folder (which Ray makes
# writable by all) lies in DIR/ray, mode 700, the nodes' user's.
# `up` takes a new or empty DIR only, and `down` removes only a DIR that `up` made (MARKER in
# DIR/env, nothing else in DIR but what this script writes there).
set -euo pipefail

PYTHON=${PYTHON:-python3}
MLFLOW_USER=${FEDBENCH_MLFLOW_USER:-fedbench-mlflow}  # runs the MLflow server when the script runs as root
CLUSTER_PYTHON_DEFAULT=/opt/fedbench-cluster/bin/python  # what scripts/install_cluster_python.sh makes
WAIT=${FEDBENCH_CLUSTER_WAIT:-120}   # seconds a part may take to come up
RAY_CPUS=${FEDBENCH_CLUSTER_CPUS:-1} # CPUs each Ray node offers
RAY_PYTHON=${FEDBENCH_RAY_PYTHON:-$PYTHON}  # Ray's nodes run from it (their jobs import fedbench and torch)

usage() { echo "usage: $0 up|down [DIR] | $0 start|stop postgres|mlflow|head|worker [DIR]" >&2; exit 2; }
die() { echo "local_cluster: $*" >&2; exit 1; }

MARKER="# written by fedbench's scripts/local_cluster.sh up"
LAYOUT="env pg pg.pw pg.admin artifacts ray ray.token initdb.log mlflow.log mlflow.pid mlflow.started ray-head.log ray-head.pid ray-head.started
  ray-worker.log ray-worker.pid ray-worker.started"

ours() {  # DIR was made by `up`: its env carries MARKER and it holds nothing else (else: the odd entry)
  [ -f "$DIR/env" ] && [ "$(head -n 1 "$DIR/env")" = "$MARKER" ] || return 1
  local entry
  for entry in "$DIR"/* "$DIR"/.[!.]*; do
    [ -e "$entry" ] || continue
    case " $(echo $LAYOUT) " in *" $(basename "$entry") "*) ;; *) basename "$entry"; return 1 ;; esac
  done
}

secret() { "$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(24))'; }

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

# -- as root, the MLflow server runs as MLFLOW_USER ---------------------------------------------

mlflow_user() {  # the server's user exists (a system user with no login and no home, as Debian's postgres),
  # and AS_MLFLOW_USER, a command prefix, runs as it: exec'd in place (setpriv keeps the pid; no root parent)
  id "$MLFLOW_USER" >/dev/null 2>&1 ||
    useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
      --comment "fedbench local_cluster.sh MLflow server" "$MLFLOW_USER" >/dev/null 2>&1 ||
    id "$MLFLOW_USER" >/dev/null 2>&1 ||  # another up made it meanwhile
    die "cannot create the system user $MLFLOW_USER to run the MLflow server as (useradd failed): nothing started"
  AS_MLFLOW_USER=(setpriv --reuid="$MLFLOW_USER" --regid="$(id -g "$MLFLOW_USER")" --init-groups --no-new-privs --)
}

server_env() {  # in a subshell: keep only what the server needs of the invoker's environment (no other
  local name    # secret reaches another user's process), then the settings it runs with
  for name in $(compgen -e); do
    case $name in PATH|LANG|LC_ALL|TZ|PGPASSWORD) ;; *) unset "$name" ;; esac
  done
  export HOME=/nonexistent MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false  # its job runner: a dozen idle workers
}

# The interpreter the MLflow server runs from: PYTHON, unless root runs the script; then the first that
# MLFLOW_USER can run and that imports mlflow (the driver's version: one release on both ends of the
# HTTP API) and psycopg2, of FEDBENCH_CLUSTER_PYTHON alone where set, else PYTHON, else
# CLUSTER_PYTHON_DEFAULT; none is one line saying why and what to do.
server_python() {
  if [ "$(id -u)" -ne 0 ]; then echo "$PYTHON"; return 0; fi
  mlflow_user
  local driver candidates py why=() found
  driver=$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("mlflow"))' 2>/dev/null) ||
    die "$PYTHON cannot import mlflow (PYTHON: the interpreter with fedbench, mlflow, psycopg2 and ray): nothing started"
  if [ -n "${FEDBENCH_CLUSTER_PYTHON:-}" ]; then candidates=("$FEDBENCH_CLUSTER_PYTHON")
  else candidates=("$(command -v "$PYTHON" || echo "$PYTHON")" "$CLUSTER_PYTHON_DEFAULT"); fi
  for py in "${candidates[@]}"; do
    [ "$py" != "$CLUSTER_PYTHON_DEFAULT" ] || [ -e "$py" ] || continue
    found=$(server_env; cd / && "${AS_MLFLOW_USER[@]}" "$py" -c \
      'import importlib.metadata as m, mlflow, psycopg2; print(m.version("mlflow"))' 2>&1 | tail -n 1 || true)
    if [ "$found" = "$driver" ]; then echo "$py"; return 0; fi
    if [[ $found =~ ^[0-9][0-9a-z.+]*$ ]]; then
      why+=("$py has mlflow $found, the driver $driver")
    else
      why+=("$py: ${found:-cannot run it}")
    fi
  done
  local joined; joined=$(printf '%s; ' "${why[@]}")
  die "as root the MLflow server runs as the user $MLFLOW_USER, which cannot use ${joined%; } - make" \
    "an interpreter it can with 'bash scripts/install_cluster_python.sh' (or set FEDBENCH_CLUSTER_PYTHON): nothing started"
}

# -- as root, Ray's nodes run as RAY_USER -------------------------------------------------------

# RAY_USER: who runs Ray's nodes, and AS_RAY_USER the command prefix that switches to it (empty: this
# process's user). A Ray node runs whatever job a driver sends it, with its user's rights: as root,
# the user whose sweeps the cluster runs (FEDBENCH_RAY_USER, else SUDO_USER: `sudo bash ... up`), and
# root only when FEDBENCH_RAY_USER=root says so; not root, this user (naming another is refused).
ray_user() {
  AS_RAY_USER=()
  if [ "$(id -u)" -ne 0 ]; then
    RAY_USER=$(id -un)
    [ -z "${FEDBENCH_RAY_USER:-}" ] || [ "$FEDBENCH_RAY_USER" = "$RAY_USER" ] ||
      die "FEDBENCH_RAY_USER=$FEDBENCH_RAY_USER: only root's up runs Ray as another user (this is $RAY_USER): nothing started"
    return 0
  fi
  RAY_USER=${FEDBENCH_RAY_USER:-}
  if [ -z "$RAY_USER" ] && [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then RAY_USER=$SUDO_USER; fi
  [ -n "$RAY_USER" ] || die "as root, Ray's nodes run as the user whose jobs they run (a job sent to a node" \
    "runs with its rights): name it with FEDBENCH_RAY_USER=USER (sudo's SUDO_USER is taken by default), or" \
    "FEDBENCH_RAY_USER=root to run them as root: nothing started"
  id -u "$RAY_USER" >/dev/null 2>&1 || die "FEDBENCH_RAY_USER=$RAY_USER: no such user: nothing started"
  [ "$(id -u "$RAY_USER")" -eq 0 ] ||
    AS_RAY_USER=(setpriv --reuid="$RAY_USER" --regid="$(id -g "$RAY_USER")" --init-groups --no-new-privs --)
}

ray_env() {  # in a subshell, for another user's nodes: only what Ray and the jobs need of root's environment
  local name home  # (no secret of root's reaches them), with that user's HOME
  for name in $(compgen -e); do
    case $name in
      PATH|LANG|LC_*|TZ|PYTHONPATH|VIRTUAL_ENV|TMPDIR|CUDA_VISIBLE_DEVICES|OMP_NUM_THREADS|MKL_NUM_THREADS) ;;
      RAY_AUTH_MODE|RAY_AUTH_TOKEN_PATH|RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER|RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL) ;;
      DASHBOARD_METRIC_PORT|AUTOSCALER_METRIC_PORT) ;;
      *) unset "$name" ;;
    esac
  done
  home=$(getent passwd "$RAY_USER" | cut -d: -f6)
  export HOME=${home:-/nonexistent} USER=$RAY_USER LOGNAME=$RAY_USER
}

# Ray's nodes run from RAY_PYTHON as RAY_USER: it must import the driver's Ray, on the Python version
# Ray accepts (RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL: patch, or minor); else one line, nothing started.
# Without fedbench or torch there, the nodes run Ray's tasks but no fedbench job: said, not refused.
ray_python() {
  ray_user
  RAY_PYTHON=$(command -v "$RAY_PYTHON" || echo "$RAY_PYTHON")  # the nodes' PATH is not this shell's
  local probe='import importlib.metadata as m, importlib.util as u, platform
try:
    ray = m.version("ray")
except m.PackageNotFoundError:
    raise SystemExit("it has no ray")
print(ray, platform.python_version(), *[x for x in ("fedbench", "torch") if u.find_spec(x) is None])'
  local driver found level=${RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL:-patch}
  driver=$("$PYTHON" -c "$probe" 2>/dev/null) ||
    die "$PYTHON cannot import ray (PYTHON: the interpreter with fedbench, mlflow, psycopg2 and ray): nothing started"
  found=$( ( [ ${#AS_RAY_USER[@]} -eq 0 ] || ray_env; cd / && "${AS_RAY_USER[@]}" "$RAY_PYTHON" -c "$probe") 2>&1 |
    tail -n 1 || true)
  local want=(${driver}) got=(${found}) why="" ours theirs
  if [ "$level" = minor ]; then ours=${want[1]%.*} theirs=${got[1]:-}; theirs=${theirs%.*}
  else ours=${want[1]} theirs=${got[1]:-}; fi
  if ! [[ ${got[0]:-} =~ ^[0-9][0-9a-z.+]*$ ]]; then why="${found:-cannot run it}"
  elif [ "${got[0]}" != "${want[0]}" ]; then why="it has ray ${got[0]}, the driver ${want[0]}"
  elif [ "$theirs" != "$ours" ]; then
    why="it is Python ${got[1]}, the driver ${want[1]} (Ray asks for the same $level version; RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor relaxes it)"
  fi
  [ -z "$why" ] || die "Ray's nodes run as the user $RAY_USER, which cannot use $RAY_PYTHON: $why - set" \
    "FEDBENCH_RAY_PYTHON to an interpreter $RAY_USER can run with ray ${want[0]}, fedbench and torch: nothing started"
  [ ${#got[@]} -le 2 ] || echo "local_cluster: warning: $RAY_PYTHON, run by $RAY_USER, lacks ${got[*]:2}: Ray's nodes run" \
    "tasks, but no fedbench job (FEDBENCH_RAY_PYTHON: an interpreter with fedbench and torch)" >&2
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

proc_started() {  # proc_started <pid>: "<start time in clock ticks since boot> <boot id>" of a live process
  local stat rest
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  rest=${stat##*) }  # the fields after the command name, which may hold spaces and parentheses
  read -r -a fields <<<"$rest"
  echo "${fields[19]} $(cat /proc/sys/kernel/random/boot_id)"  # field 22 of proc(5)
}

start_bg() {  # start_bg <name> <command...>: a process group of its own, its pid in DIR/<name>.pid and
  local name=$1; shift  # its start time in DIR/<name>.started (a pid alone may be reused after a crash)
  setsid "$@" >"$DIR/$name.log" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" >"$DIR/$name.pid"
  proc_started "$pid" >"$DIR/$name.started" || true  # exited at once: wait_for reports it
}

stop_bg() {  # stop a process group started by start_bg: TERM, then KILL after 20 s. The pid is signalled
  local name=$1 pidfile="$DIR/$1.pid"  # only while it is the process start_bg started (same boot, same
  [ -f "$pidfile" ] || return 0        # start time); once it has exited, its group id cannot be reused
  local pid; pid=$(cat "$pidfile")      # while any member lives, so what is left of the group is ours
  if ! [[ $pid =~ ^[1-9][0-9]*$ ]]; then
    echo "local_cluster: $pidfile holds no pid ($pid): nothing signalled" >&2
    rm -f "$pidfile" "$DIR/$name.started"
    return 0
  fi
  local now started
  if now=$(proc_started "$pid"); then
    started=$(cat "$DIR/$name.started" 2>/dev/null || true)
    if [ "$now" != "$started" ]; then
      echo "local_cluster: pid $pid of $pidfile is not the process up started (that one exited; the pid is" \
        "now another process's): not signalled" >&2
      rm -f "$pidfile" "$DIR/$name.started"
      return 0
    fi
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  kill -KILL -- "-$pid" 2>/dev/null || true  # whatever of the group is left (Ray's workers, uvicorn's)
  rm -f "$pidfile" "$DIR/$name.started"
}

# Ray's servers listen on every interface unless their node's IP is literally 127.0.0.1, and Ray
# swaps 127.0.0.1 for the machine's own IP wherever it meets it (services.resolve_ip_for_localhost,
# `ray start --node-ip-address` and `ray.init(address=...)` alike). Two switches keep every part on
# loopback (GCS, raylets, object managers, workers, dashboard and its agents, runtime-env agents,
# the client server, metrics): DIR/env sets Ray's single-machine mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0:
# the local IP is 127.0.0.1) for every Ray process and driver, and the nodes start through RAY_START,
# which keeps 127.0.0.1 literal and lets a worker node join in that mode.
RAY_START='import sys, ray._private.ray_constants as c, ray._private.services as s
s.resolve_ip_for_localhost = lambda host: host
c.ENABLE_RAY_CLUSTER = True
from ray.scripts.scripts import main
sys.argv[0] = "ray"
main()'

ray_node() {  # ray_node <name> <ray start arguments...>: one Ray node as RAY_USER, kept by `ray start --block`
  local name=$1; shift
  local node=("$RAY_PYTHON" -c "$RAY_START" start --block --node-ip-address=127.0.0.1 \
    --num-cpus="$RAY_CPUS" --object-store-memory=100000000 --disable-usage-stats --temp-dir="$DIR/ray/r" \
    --node-manager-port="$(free_port)" --object-manager-port="$(free_port)" --metrics-export-port="$(free_port)" \
    --dashboard-agent-listen-port="$(free_port)" --dashboard-agent-grpc-port="$(free_port)" \
    --runtime-env-agent-port="$(free_port)" "$@")
  ray_user
  if [ ${#AS_RAY_USER[@]} -gt 0 ]; then  # another user's: root's environment stays root's
    (ray_env; cd / && start_bg "ray-$name" "${AS_RAY_USER[@]}" "${node[@]}")
  else  # no database password in Ray's environment: its workers run users' code and record through MLflow
    start_bg "ray-$name" env -u PGPASSWORD -u PGPASSFILE "${node[@]}"
  fi
}

exposed_sockets() {  # the cluster's processes' TCP listeners on any address but loopback, from /proc
  "$PYTHON" - "$DIR" <<'EOF'
import ipaddress, os, sys
from pathlib import Path
d = Path(sys.argv[1])
groups = {int((d / f"{n}.pid").read_text()) for n in ("ray-head", "ray-worker", "mlflow") if (d / f"{n}.pid").exists()}
pids = {int((d / "pg" / "postmaster.pid").read_text().split()[0])} if (d / "pg" / "postmaster.pid").exists() else set()
for p in Path("/proc").iterdir():
    try:
        if p.name.isdigit() and os.getpgid(int(p.name)) in groups:
            pids.add(int(p.name))
    except OSError:
        pass
listen = {}
for table in ("tcp", "tcp6"):
    for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A":
            raw = bytes.fromhex(f[1].split(":")[0])
            ip = ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))
            mapped = getattr(ip, "ipv4_mapped", None)
            if not (ip.is_loopback or (mapped is not None and mapped.is_loopback)):
                listen[f[9]] = f"{ip}:{int(f[1].split(':')[1], 16)}"
for pid in pids:
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:[") and target[8:-1] in listen:
                print(f"{Path(f'/proc/{pid}/comm').read_text().strip()} on {listen[target[8:-1]]}", end="; ")
    except OSError:
        pass
EOF
}

ray_refuses_strangers() {  # the GCS refuses a request without the token (a Ray before 2.52 ignores RAY_AUTH_MODE)
  "$PYTHON" - "$RAY_ADDRESS" <<'EOF'
import sys
import grpc
from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
with grpc.insecure_channel(sys.argv[1]) as channel:  # a plain channel: no token, whatever the environment
    try:
        gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=30)
    except grpc.RpcError as e:
        sys.exit(0 if e.code() == grpc.StatusCode.UNAUTHENTICATED else 1)
sys.exit(1)
EOF
}

nodes_alive() {  # the cluster has at least $1 live nodes (a bounded poll: ray.init waits on a dead GCS for good)
  timeout 30 "$PYTHON" - "$RAY_ADDRESS" "$1" <<'EOF'
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
  RAY_PYTHON=$FEDBENCH_RAY_PYTHON  # what up chose (FEDBENCH_RAY_USER likewise)
  case $1 in
    postgres)
      # address, port and socket folder are in postgresql.conf (up): pg_ctl -o would split a folder name on spaces
      as_pg "$(pg_bin)/pg_ctl" -D "$DIR/pg" -l "$DIR/pg/server.log" -w -t "$WAIT" start >/dev/null ;;
    mlflow)
      local server=("$SERVER_PYTHON" -m mlflow server --backend-store-uri "$FEDBENCH_POSTGRES_URI"
        --artifacts-destination "$DIR/artifacts" --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1)
      if [ "$(id -u)" -eq 0 ]; then  # never root: any local user reaches its HTTP API (artifacts included)
        mlflow_user
        (server_env; cd / && start_bg mlflow "${AS_MLFLOW_USER[@]}" "${server[@]}")
      else  # MLflow's job runner (GenAI jobs, a dozen worker processes) serves nothing fedbench records
        MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false start_bg mlflow "${server[@]}"
      fi
      wait_for "the MLflow server" mlflow http_ok "$MLFLOW_TRACKING_URI/health" ;;
    head)
      ray_node head --head --port="$RAY_PORT" --ray-client-server-port="${RAY_CLIENT_SERVER_PORT:-$(free_port)}" --include-dashboard=false \
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
  [ -z "$(ls -A "$DIR")" ] || die "$DIR is not empty: up takes a new or empty folder (down removes all of it)"
  if [ "$(id -u)" -eq 0 ]; then  # PostgreSQL and the MLflow server, unprivileged, write in DIR
    mlflow_user
    local who users=(postgres "$MLFLOW_USER") parts="PostgreSQL runs as postgres and the MLflow server as $MLFLOW_USER"
    if [ ${#AS_RAY_USER[@]} -gt 0 ]; then
      users+=("$RAY_USER") parts="PostgreSQL runs as postgres, the MLflow server as $MLFLOW_USER and Ray as $RAY_USER"
    fi
    for who in "${users[@]}"; do
      id "$who" >/dev/null 2>&1 || continue  # no postgres user: as_pg says so
      setpriv --reuid="$who" --regid="$(id -g "$who")" --init-groups -- test -x "$(dirname "$DIR")" ||
        die "the user $who cannot reach $DIR (a folder above it is closed to other users), and as root $parts:" \
          "take a folder they all can reach, such as the default /tmp/fedbench-cluster: nothing started"
    done
  fi
  mkdir -p "$DIR/artifacts"
  chmod 755 "$DIR"  # the postgres user and MLFLOW_USER (as root) need to reach DIR/pg and DIR/artifacts
  if [ "$(id -u)" -eq 0 ]; then  # the server's alone; the rest of DIR stays the invoker's
    chown "$MLFLOW_USER:$(id -g "$MLFLOW_USER")" "$DIR/artifacts"
    chmod 700 "$DIR/artifacts"
  fi
  # Ray's temporary folder (sockets, logs, the runtime environments its workers import from), which Ray
  # makes writable by every user (mode 777): inside DIR/ray, which is the invoker's alone
  mkdir -m 700 "$DIR/ray"
  # Ray's token (as Ray's own generator makes one), written straight to its file: on no command line
  (umask 077; "$PYTHON" -c 'import secrets; print(secrets.token_hex(32), end="")' >"$DIR/ray.token")
  local admin_pw role_pw
  admin_pw=$(secret) role_pw=$(secret)
  # the PostgreSQL superuser's password stays the invoker's (DIR/env goes to Ray's user, below)
  (umask 077; printf '%s\n' "PG_ADMIN=fedbench_admin PG_ADMIN_PASSWORD=$admin_pw" >"$DIR/pg.admin")
  (umask 077; cat >"$DIR/env" <<EOF
$MARKER
export PG_PORT=$(free_port) MLFLOW_PORT=$(free_port) RAY_PORT=$(free_port) RAY_CLIENT_SERVER_PORT=$(free_port)
# PostgreSQL's role fedbench (owns the database mlflow, no superuser); libpq reads PGPASSWORD
export FEDBENCH_POSTGRES_URI=postgresql+psycopg2://fedbench@127.0.0.1:\$PG_PORT/mlflow PGPASSWORD=$role_pw
export MLFLOW_TRACKING_URI=http://127.0.0.1:\$MLFLOW_PORT
export RAY_ADDRESS=127.0.0.1:\$RAY_PORT RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
# Ray refuses any process without the token: nodes and drivers read it from this file
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$(printf %q "$DIR/ray.token")
export DASHBOARD_METRIC_PORT=$(free_port) AUTOSCALER_METRIC_PORT=$(free_port)
${RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL:+export RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=$RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL}
# who runs Ray's nodes, from which interpreter (start head|worker reads them)
FEDBENCH_RAY_USER=$(printf %q "$RAY_USER") FEDBENCH_RAY_PYTHON=$(printf %q "$RAY_PYTHON")
EOF
  )
  if [ ${#AS_RAY_USER[@]} -gt 0 ]; then  # Ray's user runs the nodes and the drivers: its folder, its token, its env
    chown "$RAY_USER:$(id -g "$RAY_USER")" "$DIR/ray" "$DIR/ray.token" "$DIR/env"
  fi
  trap failed_up EXIT
  mkdir -p "$DIR/pg"
  [ "$(id -u)" -ne 0 ] || chown postgres "$DIR/pg"
  local pwfile="$DIR/pg.pw"  # the superuser's password for initdb, readable by it alone, removed at once
  (umask 077; echo "$admin_pw" >"$pwfile")
  [ "$(id -u)" -ne 0 ] || chown postgres "$pwfile"
  as_pg "$(pg_bin)/initdb" -D "$DIR/pg" -U fedbench_admin --auth=scram-sha-256 --pwfile="$pwfile" -E UTF8 \
    >"$DIR/initdb.log" 2>&1 || { rm -f "$pwfile"; tail -n 20 "$DIR/initdb.log" >&2; die "initdb failed"; }
  rm -f "$pwfile"
  local socket_dir=${DIR//\\/\\\\}
  socket_dir=${socket_dir//\'/\'\'}  # a quoted value of postgresql.conf: backslash and quote doubled
  # shellcheck disable=SC1091
  (source "$DIR/env"; printf "%s\n" "# local_cluster.sh: loopback only" "listen_addresses = '127.0.0.1'" \
    "port = $PG_PORT" "unix_socket_directories = '$socket_dir/pg'" >>"$DIR/pg/postgresql.conf")
  start_part postgres
  # the password in psql's environment, the SQL on stdin: no secret on a command line (ps shows those
  # to every user); psql is a client over TCP, so it needs no other user than this one
  PGPASSWORD="$admin_pw" "$(pg_bin)/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U fedbench_admin \
    -d postgres >/dev/null <<EOF
CREATE ROLE fedbench LOGIN PASSWORD '$role_pw' NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
CREATE DATABASE mlflow OWNER fedbench;
EOF
  start_part mlflow
  start_part head
  start_part worker
  exposed=$(exposed_sockets) || die "cannot list the cluster's listening sockets from /proc"
  [ -z "$exposed" ] || die "listening beyond 127.0.0.1 (this Ray may bind differently): $exposed"
  ray_refuses_strangers || die "the Ray head at $RAY_ADDRESS answers a request without the cluster's token" \
    "(token authentication needs Ray >= 2.52: python -m pip install -U 'ray[default]>=2.52')"
  trap - EXIT
  echo "local cluster up in $DIR:"
  printf '  %s\n' "PostgreSQL     $FEDBENCH_POSTGRES_URI" "MLflow server  $MLFLOW_TRACKING_URI (artifacts in $DIR/artifacts)" \
    "Ray head       $RAY_ADDRESS, with one worker node, run by $RAY_USER (token: $DIR/ray.token)" \
    "source $DIR/env sets RAY_ADDRESS, RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH, MLFLOW_TRACKING_URI, FEDBENCH_POSTGRES_URI, PGPASSWORD (nothing listens beyond 127.0.0.1)"
}

failed_up() {  # stop what started; the folder stays, with the logs the messages above point to
  echo "local_cluster: up failed; stopping what started (the logs stay in $DIR; $0 down $DIR removes it)" >&2
  for part in worker head mlflow postgres; do stop_part "$part"; done
}

down() {
  local odd why
  if ! odd=$(ours); then
    if [ -n "$odd" ]; then why="it holds $odd, which up never writes"; else why="no env of its own"; fi
    die "$DIR was not made by '$0 up' ($why): nothing stopped or deleted"
  fi
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
if [ "$cmd" = up ]; then
  ray_python  # as root: RAY_USER and AS_RAY_USER, checked before anything is made or started
  SERVER_PYTHON=$(server_python)  # likewise
  mkdir -p "$DIR"
elif [ ! -d "$DIR" ]; then
  [ "$cmd" = down ] && exit 0  # nothing up there
  die "$DIR: no such folder (no cluster is up there)"
fi
DIR=$(cd "$DIR" && pwd)
case $cmd in
  up) up ;;
  down) down ;;
  start|stop) ours >/dev/null || die "$DIR was not made by '$0 up': nothing started or stopped"
    [ "$cmd $2" != "start mlflow" ] || SERVER_PYTHON=$(server_python)
    "${cmd}_part" "$2" ;;
esac
