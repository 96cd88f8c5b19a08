"""scripts/profile_round.py profiles the rounds after warm-up, fedbench's and the loop's, with every round timed."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import require_data

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
require_data(Path("/usr/share/datasets/fashion-mnist").is_dir() or bool(os.environ.get("FEDBENCH_FMNIST_DIR")),
             "Fashion-MNIST not found")

sys.path.insert(0, str(SCRIPTS))
spec = importlib.util.spec_from_file_location("profile_round", SCRIPTS / "profile_round.py")
profile_round = importlib.util.module_from_spec(spec)
spec.loader.exec_module(profile_round)

TINY = dict(model="mclr", num_clients=20, per_client=60, cohort=4, device="cpu")  # a step of 50, a step of 10


@pytest.mark.slow
def test_only_the_rounds_after_warm_up_are_profiled(capsys):
    for fn in (profile_round.profile_fedbench, profile_round.profile_seq):
        ops = {}
        for warmup in (1, 2):  # 2 rounds profiled, then 1
            prof, seconds = fn(TINY, 3, warmup, "cpu")
            assert len(seconds) == 3 and all(s > 0 for s in seconds)
            ops[warmup] = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
        assert 1.6 <= ops[1] / ops[2] <= 2.4, (fn.__name__, ops)  # rounds of the same work: twice the operators
        profile_round.summary(fn.__name__, prof, seconds, 2, "cpu", 5)
    out = capsys.readouterr().out
    assert out.count("== ") == 2 and out.count("1 profiled rounds") == 2 and "aten ops" in out
