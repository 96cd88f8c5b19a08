"""`hydra/launcher=batched`: a multirun's jobs grouped and each group trained as one program
(fedbench.runs.launch). Hydra instantiates launchers only from the hydra_plugins package, so the
class lives here; the work is fedbench's."""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher


class BatchedLauncher(Launcher):
    def __init__(self, max_batch: int = 0, ray=None) -> None:
        super().__init__()
        self.max_batch = int(max_batch)
        self.ray = None if ray is None else dict(ray)  # {address, num_cpus, max_retries}: each group a Ray task
        self.config = self.hydra_context = self.task_function = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        from fedbench.runs.launch import compose_once

        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        compose_once(hydra_context.config_loader)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from fedbench.runs.launch import launch_batched

        return launch_batched(self.hydra_context, self.config, job_overrides, initial_job_idx, self.max_batch, self.ray)
