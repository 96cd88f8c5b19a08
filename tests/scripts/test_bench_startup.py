"""scripts/bench_startup.py: the fixed cost is the run's total minus the training wall_time its record holds."""

from __future__ import annotations

import sys
from pathlib import Path


from tests.conftest import require_module

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
bench_startup = require_module("bench_startup", "scripts/bench_startup.py")


def test_training_seconds_is_the_last_wall_time_of_the_runs_metrics(tmp_path):
    folder = tmp_path / "outputs" / "mlartifacts" / "abc123" / "artifacts"
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text("round,wall_time,eval_time\n1,0.1,0.5\n2,0.25,0.9\n")
    assert bench_startup.training_seconds("...\nMLflow run           abc123\n", tmp_path) == 0.25


def test_table_ratios_are_to_import_torch():
    times = {"import torch": [2.0, 1.0, 3.0], "/x|run": [5.0, 4.0, 6.0], "/x|run: fixed cost (total - wall_time)": [3.0]}
    lines = bench_startup.table(times, {"/x": "after"}).splitlines()
    assert lines[2] == "| import torch | 2.00 | 1.00 | 3.00 | 1.00 |"
    assert lines[3] == "| after: run (total) | 5.00 | 4.00 | 6.00 | 2.50 |"
    assert lines[4] == "| after: run: fixed cost (total - wall_time) | 3.00 | 3.00 | 3.00 | 1.50 |"
