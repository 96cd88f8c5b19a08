"""One training run: validate, build, record in MLflow, train with a progress bar, summarise."""

from __future__ import annotations

import hashlib
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from fedbench.config.renames import before_later_switches, before_shared_extras
from fedbench.config.validate import written_out
from fedbench.runs.build import build_federation
from fedbench.engine.checkpoint import RECORD_DIGEST, load_checkpoint, save_checkpoint
from fedbench.engine.loop import initial_state, run, warm_up
from fedbench.core.errors import ConfigError, DivergenceError, FedbenchError, write_failure
from fedbench.runs import interrupts
from fedbench.runs.checkpoint_space import check_checkpoint_space
from fedbench.runs.interrupts import GracefulInterrupt, describe, signal_of
from fedbench.core.ownership import CHECKPOINT_NAME, shell_path  # CHECKPOINT_NAME: where resume continues from
from fedbench.core.terminal import printable
from fedbench.tracking.store import StoreError, quiet_libraries
from fedbench.tracking.targets import format_rounds, rounds_to_target


def config_hash(cfg: DictConfig) -> str:
    """Hash of the resolved config without run-placement keys (hydra, tracking, engine)."""
    container = OmegaConf.to_container(cfg, resolve=True)
    for key in ("hydra", "tracking", "resume"):
        container.pop(key, None)
    if container.get("partition", {}).get("seed") == container.get("seed"):  # the split before partition.seed
        container["partition"].pop("seed")  # existed: checkpoints of earlier versions keep their hash
    before_shared_extras(container)  # likewise the local-step extras before they were shared
    dataset = container.get("dataset", {})
    if dataset.get("name") == "synthetic":  # its generator and test users before they were options
        from fedbench.data.synthetic import GENERATORS, resolve_generator

        if dataset.get("generator") in GENERATORS:  # auto hashes as the generator it chooses (the same data)
            dataset["generator"] = resolve_generator(dataset["generator"], dataset.get("num_users", 30))
        if dataset.get("generator") == "sequential":
            dataset.pop("generator")
        if "eval_users" in dataset and (dataset["eval_users"] == 0 or dataset["eval_users"] >= dataset.get("num_users", 30)):
            dataset.pop("eval_users")
    before_later_switches(container)  # and FedADMM's chained, FedProx's hetero_epochs off
    if not container.get("stop_at_targets", True):  # off: the hash of runs from before the option
        container.pop("stop_at_targets")
    return hashlib.sha256(OmegaConf.to_yaml(OmegaConf.create(container)).encode()).hexdigest()[:16]


def run_job(
    cfg: DictConfig, run_dir: Path, quiet: bool = False, tags: dict[str, str] | None = None, sweep: bool = False,
    label: str = "", log_file: Path | None = None,
) -> dict[str, Any]:
    """Train one configuration; raises FedbenchError subclasses for the CLI to report.

    In a sweep (`sweep=True`) with tracking.skip_finished, a configuration that already FINISHED
    in the experiment is not run again (its summary is returned), and an interrupted one
    continues from the checkpoint in the run directory recorded in its `run_dir` tag.

    A run that `fedbench run` prestarted a writer for (tracking.writer) is recorded by that
    process; any other (from Python, a sweep's job) imports MLflow and records in this one.
    """
    from fedbench.tracking import writer as tracking_writer

    writer = None if sweep else tracking_writer.take()
    try:
        return _run_job(cfg, run_dir, quiet, tags, sweep, label, log_file, writer)
    finally:
        if writer is not None:
            writer.close()


def _run_job(cfg: DictConfig, run_dir: Path, quiet: bool, tags: dict[str, str] | None, sweep: bool, label: str,
             log_file: Path | None, writer) -> dict[str, Any]:
    if writer is None:
        quiet_libraries()
    cfg = written_out(cfg)  # recorded the same however it was typed (shorthands written out)
    if cfg.engine.get("threads"):
        torch.set_num_threads(int(cfg.engine.threads))
    fed, info = build_federation(cfg)  # every config and data error surfaces here, before MLflow
    job = Job(cfg, run_dir, quiet, tags, sweep, label, log_file, writer)
    try:
        done = job.open(fed, info)
    except KeyboardInterrupt as exc:  # before round 1: the record, if started, says so
        job.failed(exc)
    if done is not None:
        return done
    try:
        check_checkpoint_space([(job.cfg, fed, job.state, run_dir)])
    except ConfigError as exc:
        job.failed(exc)
    drawn = None
    try:
        with GracefulInterrupt(quiet) as stop:
            job.stop = stop
            run(fed, job.state, job.on_round, warmup=job.warmup)
        if writer is None:  # its curves drawn by this process's drawing thread while its record's end is written
            drawn = job.draw()
        job.save()
    except BaseException as exc:
        if drawn is not None:
            drawn.close()
        job.failed(exc)
    return job.finish(drawn)


FINAL_CHECKPOINT_TAG = "final_checkpoint"  # why a finished run has no final checkpoint, when it has none


class Job:
    """One run's record around its training, however it is trained (alone, or as a lane of a
    batched group): skip-finished and resume, the MLflow record, checkpoints, progress lines."""

    def __init__(self, cfg: DictConfig, run_dir: Path, quiet: bool = False, tags: dict[str, str] | None = None,
                 sweep: bool = False, label: str = "", log_file: Path | None = None, writer=None):
        self.cfg, self.run_dir, self.quiet, self.tags, self.sweep, self.label = cfg, run_dir, quiet, tags, sweep, label
        self.writer = writer  # a tracking.writer process that records for this run, or None: MLflow in this one
        self.warmup: float | None = None
        self.say = JobOutput(label, log_file, quiet)
        self.stop: GracefulInterrupt | None = None
        self.bar = None
        self.claims: list[Path] = []  # the folders this run owns (core.ownership) until it ends
        self.recorder = None  # until open() makes it
        self.saved_round: int | None = None  # the round of the checkpoint on disk, once one is known
        self.lanes = 1  # trained as one of this many lanes (runs.batched): its wall_time is its share

    def open(self, fed, info, extra_tags: dict[str, str] | None = None) -> dict[str, Any] | None:
        """Prepare the record and the state to train from; returns the summary instead when there is
        nothing to train (a finished configuration skipped in a sweep, a finished run resumed)."""
        try:
            done = self._open(fed, info, extra_tags)
        except BaseException:
            self.release()
            raise
        if done is not None:
            self.release()
        return done

    def release(self) -> None:
        from fedbench.core.ownership import release

        for folder in self.claims:
            release(folder)
        self.claims = []

    def _open(self, fed, info, extra_tags: dict[str, str] | None) -> dict[str, Any] | None:
        from fedbench.core.ownership import claim, refuse_overwrite

        cfg, run_dir, say, tags = self.cfg, self.run_dir, self.say, self.tags
        self.fed = fed
        if self.writer is None:
            from fedbench.tracking.recorder import Recorder

            recorder = Recorder(cfg)
        else:
            from fedbench.tracking.writer import RemoteRecorder

            recorder = RemoteRecorder(self.writer, cfg)
        self.recorder = recorder
        recorder.check_reachable()
        claim(run_dir)  # one live writer per folder (core.ownership), before the run writes there
        self.claims.append(run_dir)
        check_writable(run_dir)
        self.state = initial_state(fed, run_dir)
        if self.writer is not None and not cfg.get("resume") and self.state.round < fed.rounds:
            self.warmup = warm_up(fed, self.state)  # while the writer opens the store (its answer awaited next)
        self.checkpoint = run_dir / CHECKPOINT_NAME
        self.digest = digest = config_hash(cfg)
        skipping = self.sweep and cfg.tracking.get("skip_finished", True)
        previous = recorder.find_previous(digest) if skipping else None
        if tags and tags.get("sweep_dir"):  # this sweep's grid holds the run: tracking.sweeps
            from fedbench.tracking.sweeps import SWEEPS_TAG, with_sweep

            known = {} if previous is None else previous.data.tags  # a run from before the tag: its sweep_dir
            sweeps = known.get(SWEEPS_TAG) or (with_sweep(None, known["sweep_dir"]) if known.get("sweep_dir") else None)
            tags = self.tags = {**tags, SWEEPS_TAG: with_sweep(sweeps, tags["sweep_dir"])}
        if skipping:
            if previous is not None and previous.info.status == "FINISHED":
                say(f"skipped, this configuration FINISHED as MLflow run {previous.info.run_id} "
                    "(tracking.skip_finished=false runs it again)")
                if tags and tags.get("sweep_dir") and getattr(recorder, "client", None) is not None:
                    recorder.client.set_tag(previous.info.run_id, SWEEPS_TAG, tags[SWEEPS_TAG])
                return recorder.summary_of(previous)
            earlier = Path(previous.data.tags.get("run_dir", "")) if previous is not None else None
            if earlier is not None and earlier.is_absolute() and earlier.is_dir() and earlier.resolve() != run_dir.resolve():
                claim(earlier)  # its job may still be running (a sweep relaunched too soon)
                self.claims.append(earlier)
            if earlier is not None and (earlier / CHECKPOINT_NAME).is_file():
                self.run_dir = run_dir = earlier  # continue where the interrupted job wrote
                self.checkpoint = run_dir / CHECKPOINT_NAME
                cfg = self.cfg = OmegaConf.merge(cfg, {"resume": True})
                self.state = initial_state(fed, run_dir)  # disk client tables: the interrupted job's
        if not cfg.get("resume") and not self.sweep:
            refuse_overwrite(run_dir)
        resumed_run_id = None
        if cfg.get("resume") and self.checkpoint.exists():
            meta = load_checkpoint(self.checkpoint, self.state, fed.device, fed.rounds)
            self.saved_round = self.state.round
            if meta["config_hash"] != digest:
                raise ConfigError(f"{self.checkpoint} was written by a different config; refusing to resume")
            resumed_run_id = meta["run_id"]
            at_targets = self.reached(self.state.history)
            # a FINISHED record is never resumed, whatever round its checkpoint holds: a run continued with
            # checkpoint_every=0, or whose final checkpoint did not fit, keeps an older one beside its whole record
            done = recorder.finished_run(resumed_run_id)
            if done is not None:  # nothing left to train or record: never log rounds, targets or artifacts twice
                how = ("at its targets" if at_targets else f"all {fed.rounds} rounds" if self.state.round >= fed.rounds
                       else f"(its checkpoint, of round {self.state.round}, is older than its record)")
                say(f"MLflow run {resumed_run_id} already FINISHED {how}; nothing to resume")
                return recorder.summary_of(done)
            say(f"resuming MLflow run {resumed_run_id} from round {self.state.round} ({self.checkpoint})")
        with interrupts.held_signals():  # the record created and its id kept, or neither
            self.run_id = recorder.start(
                {
                    "partition_fingerprint": info.partition_fingerprint,
                    "dataset": cfg.dataset.name,
                    "algorithm": cfg.algorithm.name,
                    "config_hash": digest,
                    "executor": info.executor,
                    "device": info.device,
                    "run_dir": str(run_dir.resolve()),
                    **(tags or {}),
                    **(extra_tags or {}),
                },
                run_id=resumed_run_id,
                logged_through=self.state.round,
            )
        interrupts.STARTED.append(str(run_dir))
        if self.label and tags and tags.get("overrides"):
            say(f"overrides: {tags['overrides']}")
        say(f"{cfg.algorithm.name} on {cfg.dataset.name} ({info.num_train} train / {info.num_test} test), "
            f"partition {cfg.partition.name} [{info.partition_fingerprint}], model {cfg.model.name} d={info.dim:,}, "
            f"{cfg.clients_per_round}/{cfg.num_clients} clients per round, executor {info.executor} on {info.device}")
        if not self.quiet and interactive():  # a bar on a terminal or in a notebook; plain lines in a log
            from tqdm.auto import tqdm

            self.bar = tqdm(total=fed.rounds, initial=self.state.round, desc=self.label or "rounds", file=sys.stderr,
                            dynamic_ncols=True)
        self.every = int(cfg.tracking.get("checkpoint_every") or 0)
        self.line_every = max(1, fed.rounds // 10)
        return None

    def reached(self, rows: list[dict[str, float]]) -> bool:
        """stop_at_targets and every target reached in `rows` (rounds' metrics): the run is complete."""
        return bool(self.cfg.get("stop_at_targets")) and rounds_to_target(rows, max(self.cfg.targets)) is not None

    def on_round(self, st, metrics) -> bool:
        """Record a round; checkpoint when due or asked to stop (then raise KeyboardInterrupt). False: the
        run is complete before its last round (stop_at_targets)."""
        rounds, bar = self.fed.rounds, self.bar
        self.recorder.log_round(metrics)
        shown = {k.replace("test_", ""): metric_text(metrics[k]) for k in ("test_accuracy", "test_loss") if k in metrics}
        if bar is not None:
            bar.set_postfix(shown, refresh=False)
            bar.update(1)
        if st.round % self.line_every == 0 or st.round == rounds:
            text = f"round {st.round}/{rounds} " + " ".join(f"{k} {v}" for k, v in shown.items())
            self.say(text, console=bar is None)
        stopping = self.stop is not None and self.stop.requested
        if (self.every and st.round % self.every == 0 and st.round < rounds) or stopping:
            self.recorder.flush()
            save_checkpoint(self.checkpoint, st, self.run_id, self.digest, (self.tags or {}).get(RECORD_DIGEST))
            self.saved_round = st.round
        if stopping and st.round < rounds:
            raise self.stop.interrupt()
        if st.round < rounds and self.reached([metrics]):  # this round's: earlier ones stopped the run already
            self.say(f"every target reached at round {st.round}: stopped (stop_at_targets)")
            return False
        return True

    def save(self) -> None:
        """The record's end (its rounds and rounds-to-target), then the final checkpoint: the checkpoint never
        claims rounds the record lacks. tracking.checkpoint_every=0 writes none ("never"; a stop signal's
        checkpoint is on_round's). A final checkpoint that cannot be written (a full disk: a grid's client tables
        take 13 GB a lane for FedADMM's Algorithm 1 on CNN 1) costs the run its final state, not its complete
        record: one warning, a tag, and the run ends FINISHED (a FINISHED run is never resumed)."""
        self.recorder.record_end(self.state.history)
        if not self.every:
            return
        try:
            save_checkpoint(self.checkpoint, self.state, self.run_id, self.digest, (self.tags or {}).get(RECORD_DIGEST))
        except OSError as exc:
            why = write_failure(exc, written_in(exc, self.run_dir))
            kept_round = "" if self.saved_round is None else f"; the checkpoint of round {self.saved_round} is kept"
            note = f"the final checkpoint (round {self.state.round}) was not written: {why}{kept_round}"
            self.recorder.set_tags({FINAL_CHECKPOINT_TAG: note})
            self.say.warn(f"{note}; the run's record is complete")
            return
        self.saved_round = self.state.round

    def failed(self, exc: BaseException) -> None:
        """Mark the record and re-raise `exc` as the CLI reports it."""
        try:
            self._failed(exc)
        finally:
            self.release()

    def _failed(self, exc: BaseException) -> None:
        recorder, state, run_dir = self.recorder, getattr(self, "state", None), self.run_dir
        self.close()
        if isinstance(exc, DivergenceError):
            recorder.fail(exc.round, exc.reason)
            raise exc
        if isinstance(exc, KeyboardInterrupt):
            if recorder is not None:
                recorder.fail(state.round if state is not None else 0, f"interrupted ({describe(signal_of(exc))}); {next_step(run_dir)}",
                              status="KILLED")
            raise exc
        if recorder is None:
            raise exc
        if isinstance(exc, StoreError):  # the record cannot be written: the periodic checkpoint matches what it holds
            marked = recorder.fail(state.round, str(exc), quiet=True)
            raise StoreError(f"{exc}; the run stopped at round {state.round}"
                             f"{'' if marked else ' (its MLflow run could not be marked FAILED and stays RUNNING)'}; "
                             f"continue from the last checkpoint with: fedbench resume {shell_path(run_dir)}") from None
        if isinstance(exc, OSError):  # disk full, unwritable folder: the run record says why, no half file is left
            why = write_failure(exc, written_in(exc, run_dir))
            recorder.fail(state.round, f"{why} ({exc.__class__.__name__}: {exc})")
            raise FedbenchError(f"{why}: the run stopped at round {state.round}; {kept(run_dir, self.saved_round)}") from None
        recorder.fail(state.round, f"{exc.__class__.__name__}: {exc}")
        raise exc

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def finish(self, drawn=None) -> dict[str, Any]:
        """The record's summary (rounds-to-target, artifacts) and the run's, printed and returned; `drawn`:
        its artifacts handed to the drawing thread already (draw())."""
        try:
            return self._finish(drawn)
        finally:
            self.release()

    def draw(self):
        """This run's artifacts (metrics.csv, curves.png) handed to the drawing thread now (a
        tracking.recorder.Drawing), or None when it logs none. Its recorder is in this process."""
        from fedbench.tracking.plots import setting_title
        from fedbench.tracking.recorder import Drawing

        if not (self.cfg.tracking.get("artifacts", True) and self.state.history):
            return None
        return Drawing(self.state.history, setting_title(self.cfg))

    def _finish(self, drawn) -> dict[str, Any]:
        self.close()
        state, cfg = self.state, self.cfg
        handed = {} if drawn is None else {"drawn": drawn}  # a RemoteRecorder draws in its writer
        summary = self.recorder.finish(state.history, artifacts=bool(cfg.tracking.get("artifacts", True)), **handed)
        accs = [h["test_accuracy"] for h in state.history if "test_accuracy" in h]
        summary.update(
            history=state.history,
            final_accuracy=accs[-1] if accs else None,
            best_accuracy=max(accs) if accs else None,
            final_loss=next((h["test_loss"] for h in reversed(state.history) if "test_loss" in h), None),
            wall_time=state.wall_time,
            eval_time=state.eval_time,
            lanes=self.lanes,
            rounds=state.round,
            tracking_uri=self.recorder.uri,
            run_dir=str(self.run_dir),
        )
        self.say.summary(format_summary(summary, self.fed.rounds, hint=not self.sweep))
        return summary


def interactive() -> bool:
    """Whether someone watches this process: stderr is a terminal, or it runs in a Jupyter kernel."""
    if sys.stderr.isatty():
        return True
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return type(shell).__name__ == "ZMQInteractiveShell"


def objective_value(summary: dict[str, Any], cfg: DictConfig) -> float:
    """The value a Hydra sweeper optimises: tracking.objective of the run's summary.
    rounds_to_<t> counts an unreached target as rounds + 1, so it stays comparable."""
    name = str(cfg.tracking.get("objective") or "final_accuracy")
    if name.startswith("rounds_to_"):
        reached = summary["rounds_to_target"].get(float(name.removeprefix("rounds_to_")))
        return float(reached if reached is not None else int(cfg.rounds) + 1)
    value = summary.get(name)
    return float("nan") if value is None else float(value)


def next_step(run_dir: Path) -> str:
    """What to do after an interrupt: resume from the checkpoint, or, with none yet, start again."""
    if (run_dir / CHECKPOINT_NAME).is_file():
        return f"the checkpoint of the last whole round is in {run_dir}; continue with: fedbench resume {shell_path(run_dir)}"
    return "nothing was checkpointed (it stopped before its first checkpoint); start the run again"


def written_in(exc: OSError, run_dir: Path) -> Path:
    """The folder a failed write was writing into: its file's, else the run folder."""
    return Path(exc.filename).parent if getattr(exc, "filename", None) else run_dir


def kept(run_dir: Path, saved_round: int | None) -> str:
    """After a failed write: the checkpoint kept (a round's, whole), and how to continue from it."""
    if saved_round is None:
        return "nothing was checkpointed; free some space and start the run again"
    return f"the checkpoint of round {saved_round} is kept; free some space and continue with: fedbench resume {shell_path(run_dir)}"


def check_writable(folder: Path) -> None:
    """Fail before training when the run directory cannot take a checkpoint."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise FedbenchError(f"cannot write to the run directory {folder}: {exc.strerror or exc}") from None


class JobOutput:
    """What a run tells its user: on stderr (prefixed with the sweep job's label, so that parallel
    jobs can be told apart) and in the job's own log file (Hydra's <job>.log)."""

    def __init__(self, label: str, log_file: Path | None, quiet: bool):
        self.prefix = f"[{label}] " if label else ""
        self.log_file, self.quiet = log_file, quiet

    def _log(self, text: str) -> None:
        text = printable(text)  # a data file's name, a store's reason: no escape in them acts on a terminal
        if self.log_file is not None:
            import time

            from fedbench.core.ownership import open_owned

            # never through a link or into another's file: the log is the run's own (core.ownership)
            with os.fdopen(open_owned(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a") as f:
                f.write("".join(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {line}\n" for line in text.splitlines()))

    def __call__(self, text: str, console: bool = True) -> None:
        if console and not self.quiet:
            print(f"fedbench: {self.prefix}{printable(text)}", file=sys.stderr, flush=True)
        self._log(text)

    def warn(self, text: str) -> None:
        """A warning on stderr, quiet or not (it says what the record alone does not), and in the log."""
        print(f"fedbench: {self.prefix}warning: {printable(text)}", file=sys.stderr, flush=True)
        self._log(f"warning: {text}")

    def summary(self, text: str) -> None:
        """The summary on stdout; a sweep job's lines in the format of its other lines (`fedbench: [job 3] ...`)."""
        lead = f"fedbench: {self.prefix}" if self.prefix else ""
        if not self.quiet:
            print("\n".join(f"{lead}{line}" if line else line for line in printable(text).splitlines()), flush=True)
        self._log(text)


def metric_text(value: float) -> str:
    """Four decimals, or four significant digits in scientific notation where the decimals would be a 30-digit
    number (a diverging loss) or all zeros."""
    return f"{value:.4f}" if value == 0 or not math.isfinite(value) or 1e-3 <= abs(value) < 1e6 else f"{value:.4e}"


def format_summary(summary: dict[str, Any], rounds: int, hint: bool = True) -> str:
    lines = ["", "== fedbench run summary =="]
    if summary.get("final_accuracy") is not None:
        lines.append(f"final test accuracy  {metric_text(summary['final_accuracy'])}   best "
                     f"{metric_text(summary['best_accuracy'])}")
    if summary.get("final_loss") is not None:
        lines.append(f"final test loss      {metric_text(summary['final_loss'])}")
    for target, reached in summary.get("rounds_to_target", {}).items():
        lines.append(f"rounds to {target:g}".ljust(21) + format_rounds(reached, rounds))
    evaluation = f", evaluation {summary['eval_time']:.1f} s more" if summary.get("eval_time") else ""
    lanes = int(summary.get("lanes") or 1)  # a lane of the batched launcher: its share of the group's rounds
    share = f"; its share as 1 of {lanes} lanes trained together, the group's wall-clock time follows" if lanes > 1 else ""
    lines.append(f"training time        {summary['wall_time']:.1f} s ({summary['rounds']} rounds{share}){evaluation}")
    lines.append(f"MLflow run           {summary['run_id']}")
    if summary.get("run_dir"):  # what `fedbench resume` takes, and where the checkpoint is
        lines.append(f"run folder           {summary['run_dir']}")
    if summary.get("artifacts"):
        lines.append(f"artifacts            {', '.join(summary['artifacts'])} in {summary.get('artifact_uri', '')}")
    if hint:  # a sweep says it once, at its end
        lines.append(f"open with            {mlflow_hint(summary.get('tracking_uri', ''))}")
    return "\n".join(lines)


def mlflow_hint(uri: str) -> str:
    return f"mlflow ui --backend-store-uri {uri}"
