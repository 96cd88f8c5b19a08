"""Start-up cost of the `fedbench` command, side by side in one run (issue 20):

  import torch     python -c "import torch": the yardstick
  --help           fedbench --help
  list             fedbench list
  run              the default `fedbench run` (MCLR on scikit-learn's digits, offline), its total time,
                   its training wall time (the run's `wall_time` metric, read from its metrics.csv
                   artifact) and its fixed cost = total - wall_time
  first run        the same run in a new folder each pass: a user's first run, whose store is new

Every command runs as a fresh process (`python -m fedbench.cli`, PYTHONPATH set to the checkout);
the commands are timed in turn, one call each per pass, so that a change of machine load hits all
of them alike; the table shows medians over the passes and each median's ratio to `import torch`.
The runs share one scratch folder and so one MLflow store (SQLite under outputs/), created by an
untimed run first, as a user's second run finds it.

    python scripts/bench_startup.py [--repeats 5] [--repo PATH ...] [--no-run]

With several --repo checkouts (e.g. a copy of main: `git archive main | tar -x -C /tmp/main`) every
checkout's commands are timed in the same passes: before and after, measured beside each other.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout


def training_seconds(run_stdout: str, cwd: Path) -> float:
    """The run's training wall time: the last `wall_time` of its metrics.csv artifact."""
    match = re.search(r"^MLflow run\s+(\w+)", run_stdout, re.M)
    if match is None:
        raise SystemExit(f"no MLflow run id in the run's output:\n{run_stdout[-2000:]}")
    [path] = (cwd / "outputs" / "mlartifacts").glob(f"**/{match.group(1)}/artifacts/metrics.csv")
    with open(path) as f:
        return float(list(csv.DictReader(f))[-1]["wall_time"])


def measure(repos: list[Path], repeats: int, with_run: bool) -> dict[str, list[float]]:
    """{row name: seconds of every pass}; rows `<repo label>: <command>` and one `import torch`."""
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        return _measure(Path(tmp), repos, repeats, with_run)


def _measure(scratch: Path, repos: list[Path], repeats: int, with_run: bool) -> dict[str, list[float]]:
    env = dict(os.environ)
    envs = {repo: {**env, "PYTHONPATH": str(repo)} for repo in repos}
    commands: dict[str, tuple[list[str], Path]] = {}
    for repo in repos:
        folder = scratch / re.sub(r"\W", "_", str(repo))
        folder.mkdir()
        commands[f"{repo}|--help"] = ([sys.executable, "-m", "fedbench.cli", "--help"], folder)
        commands[f"{repo}|list"] = ([sys.executable, "-m", "fedbench.cli", "list"], folder)
        if with_run:
            commands[f"{repo}|run"] = ([sys.executable, "-m", "fedbench.cli", "run"], folder)
            timed(commands[f"{repo}|run"][0], folder, envs[repo])  # the store, the .pyc files, the page cache
            commands[f"{repo}|first run"] = ([sys.executable, "-m", "fedbench.cli", "run"], folder / "first")
    times: dict[str, list[float]] = {"import torch": []}
    timed([sys.executable, "-c", "import torch"], scratch, env)
    for i in range(repeats):
        times["import torch"].append(timed([sys.executable, "-c", "import torch"], scratch, env)[0])
        for name, (argv, cwd) in commands.items():
            if name.endswith("|first run"):  # a folder of its own, new in each pass
                cwd = cwd / str(i)
                cwd.mkdir(parents=True)
            seconds, out = timed(argv, cwd, envs[Path(name.split("|")[0])])
            times.setdefault(name, []).append(seconds)
            if name.endswith(("|run", "|first run")):
                name = name.replace("|first run", "|run (first)")
                wall = training_seconds(out, cwd)
                times.setdefault(name.replace("|run", "|run: training wall_time"), []).append(wall)
                times.setdefault(name.replace("|run", "|run: fixed cost (total - wall_time)"), []).append(seconds - wall)
    return times


def table(times: dict[str, list[float]], labels: dict[str, str]) -> str:
    torch_s = statistics.median(times["import torch"])
    rows = ["| command | median s | min s | max s | x import torch |", "|---|---:|---:|---:|---:|"]
    for name, values in times.items():
        repo, _, command = name.partition("|")
        shown = f"{labels[repo]}: {command}" if command else name
        if command == "run":
            shown += " (total)"
        med = statistics.median(values)
        rows.append(f"| {shown} | {med:.2f} | {min(values):.2f} | {max(values):.2f} | {med / torch_s:.2f} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="passes (each command once per pass)")
    parser.add_argument("--repo", type=Path, action="append", help="a checkout to time (repeatable; default: this one)")
    parser.add_argument("--no-run", action="store_true", help="time --help and list only")
    args = parser.parse_args()
    repos = [r.resolve() for r in (args.repo or [ROOT])]
    labels = {str(r): (r.name if len(repos) > 1 else "fedbench") for r in repos}
    times = measure(repos, args.repeats, not args.no_run)
    print(f"median of {args.repeats} interleaved passes, {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    print(table(times, labels))


if __name__ == "__main__":
    main()
