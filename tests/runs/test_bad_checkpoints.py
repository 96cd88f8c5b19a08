"""A checkpoint that is not this run's (other shapes, another layout) is refused at load, in one
line with exit code 2, before the MLflow run is touched: never a run marked FAILED mid-way (issue 32, item 17)."""

from __future__ import annotations

import pytest
import torch

from fedbench.core.errors import ConfigError
from tests.faultkit import SMALL, runs
from tests.runs.test_faults import run_job_in


KINDS = {"float64": lambda v: v.double(), "int64": lambda v: v.long(), "sparse": lambda v: v.to_sparse(),
         "meta": lambda v: v.to("meta"),  # each failed deep in the round, a traceback (issue: hostile files)
         "sharing memory": lambda v: torch.zeros(1, dtype=v.dtype).expand(v.shape),  # stride 0: [10^9, d] in 5 kB
         "NaN": lambda v: torch.full_like(v, float("nan"))}  # resumed, the run ended FAILED as diverged, exit 3
HISTORIES = {"text": lambda h: h[0].update(test_accuracy="0.5"), "tensor": lambda h: h[0].update(test_loss=torch.zeros(3)),
             "round": lambda h: h[0].update(round=2**62), "key": lambda h: h[0].update({1: 0.5}),
             # one row referenced many times (the pickle's memo), many metrics: a 0.9 MB file held the resume for minutes
             "rows beyond its round": lambda h: h.extend([h[0]] * 1000),
             "metrics": lambda h: h[0].update({f"m{i}": 0.5 for i in range(2000)})}
# a table's client ids (SCAFFOLD's c_i, 20 clients): each was loaded as it came (a float truncated, a duplicate's row dropped)
TABLE_IDS = {"float": lambda ids: ids.double(), "duplicate": lambda ids: ids.clone().fill_(ids[0]),
             "negative": lambda ids: ids - 100, "beyond the population": lambda ids: ids + 20}


@pytest.mark.parametrize("change", ["shapes", "tables", "layout", *(f"server {k}" for k in KINDS), "table rows float64",
                                    *(f"history {k}" for k in HISTORIES), *(f"table ids {k}" for k in TABLE_IDS)])
def test_a_checkpoint_of_another_shape_is_refused_before_training(tmp_path, change):
    run_job_in(tmp_path, *SMALL, "rounds=2", "algorithm=scaffold")
    ckpt = tmp_path / "run" / "checkpoint.pt"
    payload = torch.load(ckpt, weights_only=True)
    if change == "shapes":
        payload["server"] = {k: torch.zeros(v.numel() + 1) for k, v in payload["server"].items()}
    elif change == "tables":
        name = next(iter(payload["tables"]))
        payload["tables"][name]["values"] = [torch.zeros(3) for _ in payload["tables"][name]["values"]]
    elif change.startswith("server "):
        payload["server"] = {k: KINDS[change.removeprefix("server ")](v) for k, v in payload["server"].items()}
    elif change.startswith("history "):  # each trained every round, then failed the record in one misleading line, exit 1
        HISTORIES[change.removeprefix("history ")](payload["history"])
    elif change.startswith("table ids "):
        for table in payload["tables"].values():
            table["ids"] = TABLE_IDS[change.removeprefix("table ids ")](table["ids"])
    elif change == "table rows float64":
        for table in payload["tables"].values():
            table["values"] = [v.double() for v in table["values"]]
    else:
        payload["history"] = {"round": 1}
    torch.save(payload, ckpt)
    with pytest.raises(ConfigError, match="does not match this run") as info:
        run_job_in(tmp_path, *SMALL, "rounds=4", "algorithm=scaffold", "resume=true")
    assert info.value.exit_code == 2
    [run] = runs(tmp_path / "m.db")[1]
    assert run.info.status == "FINISHED" and "failure_reason" not in run.data.tags


def test_a_checkpoint_with_compressed_entries_is_refused_before_it_is_inflated(tmp_path, monkeypatch):
    """torch.save stores its entries as they are: one rewritten with deflated entries (a 1 MB file declaring
    1 GB of tensors) was inflated by torch.load before any check. Nothing is unpacked: torch.load is not called."""
    import zipfile

    from fedbench.engine import checkpoint

    run_job_in(tmp_path, *SMALL, "rounds=2")
    ckpt = tmp_path / "run" / "checkpoint.pt"
    with zipfile.ZipFile(ckpt) as archive:
        entries = {info.filename: archive.read(info.filename) for info in archive.infolist()}
    with zipfile.ZipFile(ckpt, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    monkeypatch.setattr(checkpoint.torch, "load", lambda *a, **k: pytest.fail("torch.load unpacked it"))
    with pytest.raises(ConfigError, match="is not a checkpoint as torch.save writes one \\(its entry .* is compressed"):
        checkpoint.read_payload(ckpt)
