"""One DLG evaluation as an MLflow run: train to round r, attack client 1's round-r upload, log
the reconstruction error per attack iteration (`dlg_error`, step = iteration) and its final
ratio e_K / e_0 (`dlg_error_ratio`). Shared by `fedbench attack dlg` and `fedbench reproduce`."""

from __future__ import annotations

from omegaconf import DictConfig

from fedbench.attacks.dlg import dlg_attack, observe
from fedbench.runs.build import build_federation
from fedbench.tracking.recorder import Recorder


def recorded_attack(cfg: DictConfig, attack_round: int, iterations: int = 100, lr: float = 1e-3,
                    optimizer: str = "gd", init: str = "normal") -> list[float]:
    fed, info = build_federation(cfg)
    recorder = Recorder(cfg)
    recorder.check_reachable()
    x, target = observe(fed, attack_round)
    errors = dlg_attack(fed, x, target, iterations=iterations, lr=lr, optimizer=optimizer, init=init, seed=cfg.seed)
    recorder.start({"attack": "dlg", "algorithm": str(cfg.algorithm.name), "attack_round": str(attack_round),
                    "partition_fingerprint": info.partition_fingerprint})
    for k, e in enumerate(errors):
        recorder.log_round({"round": k, "dlg_error": e})
    recorder.log_round({"round": len(errors) - 1, "dlg_error_ratio": errors[-1] / errors[0]})
    recorder.finish([], artifacts=False)
    return errors
