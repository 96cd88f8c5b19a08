"""Run a reproduction: check what it needs, train each arm's seeds in this process (runs.api: every run
recorded in one MLflow experiment and checkpointed in its own folder), measure the histories the runs
return, compare with the paper, save and log the comparison."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from fedbench.config.compose import conf_dir, group_choices_of
from fedbench.config.preflight import MAX_GRID_JOBS, CheckedComposer
from fedbench.config.schema import MAX_SEED
from fedbench.core.errors import ConfigError, DataUnavailableError, DivergenceError, FedbenchError, report_error, unknown_choice
from fedbench.core.output_files import write_output
from fedbench.core.user_yaml import load_yaml
from fedbench.reproduce.entry import Arm, Claim, Reproduction, Scale, paper_count
from fedbench.reproduce.compare import (COLLAPSE_RULE, MIN_SEEDS, RunResult, aggregate, comparison, display_frame,
                                        over_seeds, seeds_needed, tie_break, to_csv_frame, to_markdown, tuning_markdown,
                                        tuning_table, winners, within_one_seed)
from fedbench.reproduce.plots import Marks, plot_figure
from fedbench.tracking.page import Section, provenance, write_page

OUTPUTS = Path("outputs") / "reproduce"


# keys a reproduction sets per job itself: an override of them would be silently replaced, so it is refused
OWN_KEYS = {"seed": "choose a reproduction's seeds with --seeds (e.g. --seeds 0-4, --seeds 5, --seeds 0,3,7)",
            "tracking.experiment": "a reproduction records into the experiment named after it",
            "tracking.run_name": "a reproduction names its runs <stamp>-<arm>",
            "experiment": "a reproduction runs its entry's preset; run another entry by its name",
            "scale": "choose a reproduction's scale with --scale"}


def refuse_own_keys(extra: tuple[str, ...]) -> None:
    """Every extra override reaches every job (it comes after the arm's own), except the keys a reproduction sets
    per job: those are refused in one line, before any work."""
    for item in extra:
        key = item.partition("=")[0].lstrip("+~")
        if key in OWN_KEYS:
            raise ConfigError(f"{item}: a reproduction sets {key} per job ({OWN_KEYS[key]})")


def parse_seeds(text: str) -> tuple[int, ...]:
    """'0-4' -> (0, 1, 2, 3, 4); '5' -> (5,); '0,3,7' -> (0, 3, 7); ranges and lists mix ('0-2,7')."""
    spans: list[range] = []
    try:
        for part in text.split(","):
            low, dash, high = part.strip().partition("-")
            first, last = int(low), int(high) if dash else int(low)
            if first < 0 or last < first:
                raise ValueError
            spans.append(range(first, last + 1))
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: expected seeds >= 0 as a range, a list or both, e.g. 0-4, 5, 0,3,7 or 0-2,7") from None
    if (largest := max(span[-1] for span in spans)) > MAX_SEED:  # the run's seed (a job's failure, named dataset.seed)
        raise ConfigError(f"--seeds {text!r}: a seed is at most 2**63 - 1 (a run's seed), got {largest}")
    # counted before listed (`0-100000000` is one line at once), without len(): a span beyond sys.maxsize overflows it
    if (count := sum(span.stop - span.start for span in spans)) > MAX_GRID_JOBS:
        raise ConfigError(f"--seeds {text!r}: {count:,} seeds; a reproduction runs at most {MAX_GRID_JOBS:,} jobs")
    seeds = [seed for span in spans for seed in span]
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: a seed appears twice")
    return tuple(seeds)


def with_seeds(rep: Reproduction, scale_name: str, seeds: tuple[int, ...]) -> Reproduction:
    """The entry with the scale's seeds replaced (everything downstream reads them from the scale)."""
    from dataclasses import replace

    return replace(rep, scales={**rep.scales, scale_name: replace(rep.scales[scale_name], seeds=tuple(seeds))})


def seed_span(seeds) -> str:
    seeds = list(seeds)
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)) else \
        ", ".join(map(str, seeds))


@dataclass
class Outcome:
    table: pd.DataFrame
    claims: list[Claim]
    markdown: str
    files: list[Path]
    section: Section | None = None  # its part of a results page (tracking.page)

    @property
    def holds(self) -> bool:
        return all(c.holds for c in self.claims)


def get_scale(rep: Reproduction, scale: str) -> Scale:
    if scale not in rep.scales:
        raise ConfigError(f"{rep.name} has no scale {scale!r}; it has: {', '.join(rep.scales)}")
    return rep.scales[scale]


def preset_groups(preset: str) -> dict[str, str]:
    """The group choices of a preset's defaults list (`override /algorithm: x`), following presets it extends."""
    path = conf_dir() / "experiment" / f"{preset}.yaml"
    groups: dict[str, str] = {}
    while path.exists():
        defaults = (load_yaml(path.read_text()) or {}).get("defaults", [])
        groups = {**group_choices_of(defaults), **groups}  # the extending preset's choices win
        parent = next((item for item in defaults if isinstance(item, str) and item != "_self_"), None)
        if parent is None:
            break
        path = conf_dir() / "experiment" / f"{parent}.yaml"
    return groups


def scale_groups(scale: Scale) -> dict[str, str]:
    """The group choices the scale's config file (conf/scale/<name>/<scale>.yaml) overrides."""
    path = conf_dir() / "scale" / f"{scale.config}.yaml"
    if not scale.config or not path.exists():
        return {}
    return group_choices_of((load_yaml(path.read_text()) or {}).get("defaults"))


def arm_choices(rep: Reproduction, scale: Scale, group: str) -> set[str]:
    """Every choice of a config group (algorithm, dataset, ...) the scale's arms use."""
    found, scale_choice = set(), scale_groups(scale).get(group)
    for arm in scale.runs:
        choice = scale_choice or preset_groups(arm.preset or rep.preset_path).get(group)
        for item in arm.overrides:
            key, _, value = item.partition("=")
            if key == group:
                choice = value
        if choice:
            found.add(choice)
    return found


def missing(rep: Reproduction, scale_name: str) -> list[str]:
    """What this checkout lacks to run the scale: the preset and scale files, algorithm/data set/model/partition configs."""
    scale = get_scale(rep, scale_name)
    if rep.blocked:
        return [rep.blocked]
    base = conf_dir()
    presets = dict.fromkeys([rep.preset_path, *(a.preset for a in scale.runs if a.preset)])
    out = [f"preset conf/experiment/{p}.yaml" for p in presets if not (base / "experiment" / f"{p}.yaml").exists()]
    if scale.config and not (base / "scale" / f"{scale.config}.yaml").exists():
        out.append(f"scale conf/scale/{scale.config}.yaml")
    if out:
        return out
    for group in ("algorithm", "dataset", "model", "partition"):
        for choice in sorted(arm_choices(rep, scale, group)):
            if not (base / group / f"{choice}.yaml").exists():
                out.append(f"{group} {choice!r}")
    return out


def job_overrides(rep: Reproduction, scale: Scale, arm: Arm, extra: tuple[str, ...] = ()) -> list[str]:
    """What `fedbench run` takes to run the arm: its preset, the scale's file, the arm's own keys."""
    return [f"experiment={arm.preset or rep.preset_path}", *([f"scale={scale.config}"] if scale.config else []),
            *arm.overrides, *extra]


@dataclass(frozen=True)
class Job:
    """One arm at one seed: the overrides of `fedbench run` and the config they compose to."""

    arm: Arm
    seed: int
    overrides: list[str]
    cfg: DictConfig


def plan(rep: Reproduction, scale: Scale, stamp: str, extra: tuple[str, ...] = (), seeds: tuple[int, ...] = (),
         composer: CheckedComposer | None = None) -> list[Job]:
    """Every job of the grid (each tuning candidate an arm), arm-major, composed and checked as `fedbench run`
    checks a command line (a ConfigError before any training). Each job is a run of its own in the experiment
    `rep.name`, named `<stamp>-<arm>`; tracking.skip_finished=false: arms with equal configs all run, and the
    comparison uses this invocation's runs, unless the command sets tracking.skip_finished=true: then an arm
    whose config FINISHED in the experiment is read back, and one interrupted continues from its checkpoint
    (a long reproduction stopped midway goes on where it stopped). seeds: these instead of the scale's.
    Hydra composes once per distinct set of config files (CheckedComposer: the seeds and step sizes of a grid
    differ in values only)."""
    if (count := len(scale.runs) * len(seeds or scale.seeds)) > MAX_GRID_JOBS:
        raise ConfigError(f"{rep.name}: {len(scale.runs):,} arms x {len(seeds or scale.seeds):,} seeds = {count:,} jobs; "
                          f"a reproduction runs at most {MAX_GRID_JOBS:,} (choose fewer with --seeds)")
    jobs = []
    fresh = [] if any(o.startswith("tracking.skip_finished=") for o in extra) else ["tracking.skip_finished=false"]
    composer = composer or CheckedComposer()
    for arm in scale.runs:
        for seed in seeds or scale.seeds:
            overrides = [*job_overrides(rep, scale, arm, extra), f"seed={seed}", f"tracking.experiment={rep.name}",
                         f"tracking.run_name={stamp}-{arm.slug}", *fresh]
            jobs.append(Job(arm, seed, overrides, composer(overrides)))
    return jobs


def check_data(jobs: list[Job]) -> None:
    """Load every distinct data set of the grid once; DataUnavailableError says which files to place where."""
    from fedbench.config.validate import params_of
    from fedbench.data import DATASETS

    seen = set()
    for cfg in (job.cfg for job in jobs):
        params = {k: v for k, v in params_of(cfg.dataset).items() if k not in ("root", "download")}
        key = (cfg.dataset.name, repr(sorted(params.items())), str(cfg.data.root))
        if key in seen:
            continue
        seen.add(key)
        DATASETS.get(cfg.dataset.name)(root=str(cfg.data.root), download=bool(cfg.data.download), **params)


def run_grid(rep: Reproduction, scale: Scale, jobs: list[Job], folder: Path, workers: int = 1
             ) -> tuple[list[RunResult], list[str]]:
    """Train every job, each in folder/<arm>/<seed>; returns the runs' histories (the series the metrics and
    plots read) and the failed jobs' messages. A failed job (divergence, bad data, a bug) is reported and the
    others still run. `workers` > 1: the lane groups (jobs with different data, e.g. the seeds of a generated
    problem) train that many at once in worker processes (runs.parallel), with the results of one process."""
    from fedbench.runs.api import run_batched

    if rep.runner == "dlg":
        return run_attacks(rep, scale, jobs)
    keys = {m.source for m in rep.metrics} | set(rep.plot)
    for job in jobs:
        announce(rep, scale, job)
    # arms and seeds that share data set, split and model train as lanes of one program
    runs = run_batched([(job.cfg, job.overrides, folder / job.arm.slug / str(job.seed), f"{job.arm.slug} seed {job.seed}")
                        for job in jobs], progress=True, sweep=True, workers=workers)
    results, failures = [], []
    for job, run in zip(jobs, runs):
        arm = job.arm
        if isinstance(run, DivergenceError) and arm.setting:  # a tuning candidate's step size too large: it loses
            print(f"[reproduce] {label(arm)} seed {job.seed} diverged: {run}", flush=True)
            results.append(RunResult(arm.method, arm.group, job.seed, int(job.cfg.rounds), pd.DataFrame({"round": []}),
                                     arm.setting, diverged=True))
            continue
        if isinstance(run, Exception):  # one failed job of the grid; the others ran
            if isinstance(run, FedbenchError):
                report_error(run)
            else:  # a bug: show it
                import traceback

                traceback.print_exception(run)
            failures.append(f"{label(arm)} seed {job.seed}: {run}")
            continue
        results.append(RunResult(arm.method, arm.group, job.seed, int(job.cfg.rounds), series(run.history, keys), arm.setting))
    return in_grid_order(scale, results), failures


def label(arm: Arm) -> str:
    return f"{arm.method} [{arm.group}]" + (f" {arm.setting}" if arm.setting else "")


def announce(rep: Reproduction, scale: Scale, job: Job) -> None:
    """One line as each arm starts (its first seed)."""
    if job.seed == scale.seeds[0]:
        print(f"[reproduce] {rep.name}: {label(job.arm)} seeds {','.join(map(str, scale.seeds))}", flush=True)


def in_grid_order(scale: Scale, results: list[RunResult]) -> list[RunResult]:
    order = {(a.method, a.group, a.setting): i for i, a in enumerate(scale.runs)}
    return sorted(results, key=lambda r: (order[(r.method, r.group, r.setting)], r.seed))


def series(history: pd.DataFrame, keys: set[str]) -> pd.DataFrame:
    """The rounds and the metrics `keys` of a run's history, as floats (as the record holds them)."""
    columns = sorted(k for k in keys if k in history)
    frame = history[["round", *columns]].astype({k: float for k in columns})
    return frame.dropna(how="all", subset=columns) if columns else frame


def run_attacks(rep: Reproduction, scale: Scale, jobs: list[Job]) -> tuple[list[RunResult], list[str]]:
    """DLG against each arm's round-`rounds` upload of client 1, one MLflow run per arm and seed; the
    history is the reconstruction error per attack iteration (`round` = iteration)."""
    from fedbench.attacks.record import recorded_attack

    results, failures = [], []
    for job in jobs:
        arm = job.arm
        announce(rep, scale, job)
        try:
            errors = recorded_attack(job.cfg, attack_round=int(job.cfg.rounds))
        except FedbenchError as exc:
            failures.append(f"{label(arm)} seed {job.seed}: {exc}")
            continue
        history = pd.DataFrame({"round": range(len(errors)), "dlg_error": errors})
        history["dlg_error_ratio"] = float("nan")
        history.loc[len(errors) - 1, "dlg_error_ratio"] = errors[-1] / errors[0]
        results.append(RunResult(arm.method, arm.group, job.seed, int(job.cfg.rounds), history))
    return in_grid_order(scale, results), failures


def tracking_uri(extra: tuple[str, ...]) -> str:
    from fedbench.tracking.store import resolve_tracking_uri

    uri = next((o.partition("=")[2] for o in extra if o.startswith("tracking.uri=")), None)
    return resolve_tracking_uri(uri or None)


def evaluate(rep: Reproduction, scale_name: str, runs: list[RunResult],
             flips: list[str] | None = None) -> tuple[pd.DataFrame, list[Claim], pd.DataFrame]:
    """The comparison (of each tuned method's winner), the claims judged on it, and the tuning grid (empty when
    nothing is tuned). With several seeds each claim is judged on the whole table and on every seed alone
    (compare.over_seeds, by the claim's own quantifier); the winners are those of the mean, on every seed.
    `flips` receives the claims whose verdict is within one seed of flipping (compare.within_one_seed)."""
    scale = rep.scales[scale_name]
    extra = (tie_break(),) if scale.tune else ()
    measured = aggregate(rep, runs, extra)
    tuning = tuning_table(rep, scale, measured)

    def judged(measured_runs: pd.DataFrame) -> tuple[pd.DataFrame, list[Claim]]:
        table = comparison(rep, winners(measured_runs, tuning)[lambda f: f["metric"] != tie_break().name], scale.paper_groups)
        return table, judge(rep, table, scale_name)

    table, claims = judged(measured)
    seed_ids = sorted({r.seed for r in runs})
    broken = len(claims) == 1 and claims[0].detail.startswith(CHECK_FAILED)
    if len(seed_ids) > 1 and not broken:  # a check that cannot run on the mean is reported once, as it failed
        per_seed = {s: judged(aggregate(rep, [r for r in runs if r.seed == s], extra))[1] for s in seed_ids}
        if flips is not None:
            flips += within_one_seed(claims, per_seed)
        claims = over_seeds(claims, per_seed)
    return table, claims, tuning


CHECK_FAILED = ("missing measurement: ", "the claim check failed with ")


def judge(rep: Reproduction, table: pd.DataFrame, scale_name: str) -> list[Claim]:
    """The entry's claims on one comparison table; a check that cannot read a cell is a failed claim."""
    try:
        return rep.check(table, scale_name)
    except KeyError as exc:  # a cell the check needs was not measured (a failed arm)
        return [Claim(rep.claim, False, f"missing measurement: {exc}")]
    except Exception as exc:  # noqa: BLE001 - a check that breaks on odd results is a failed claim, not a traceback
        first = (str(exc).strip().splitlines() or [""])[0]
        return [Claim(rep.claim, False, f"the claim check failed with {type(exc).__name__}: {first}".rstrip(": "))]


def collapses(table: pd.DataFrame) -> list[str]:
    """One line per arm and target with a collapsed seed (compare.COLLAPSE_RULE)."""
    rows = table[table["collapse"] != ""] if "collapse" in table else table.iloc[0:0]
    return [f"- {r.method} [{r.group}] {r.metric}: {r.collapse} ({r.after_target})" for r in rows.itertuples()]


def machine(extra: tuple[str, ...] = ()) -> str:
    """What a measured compute time ran on: 'a 2-core CPU' or the GPU's name (the CPU when the command sets
    engine.device=cpu on a machine with a GPU)."""
    import torch

    if torch.cuda.is_available() and "engine.device=cpu" not in extra:
        return f"{torch.cuda.get_device_name(0)} ({os.cpu_count()} CPU cores)"
    return f"a {os.cpu_count()}-core CPU"


def intro(rep: Reproduction, scale_name: str, seconds: float | None = None, where: str | None = None,
          seed_note: str = "") -> list[str]:
    """What precedes an entry's tables on every page (Markdown and HTML alike): the paper's sentence, the setting,
    the seeds, the compute."""
    scale = rep.scales[scale_name]
    out = [f"Paper: {rep.quote}"] if rep.quote else []
    out += [f"Setting: {scale.note}"] if scale.note else []
    out += [f"Seeds: {seed_span(scale.seeds)}" + (f" ({seed_note})" if seed_note else "")]
    if seconds is not None:  # the catalog's figure is an estimate; this is what the grid took here
        out.append(f"Compute: measured {seconds:.0f} s on {where or machine()} (catalog estimate: {scale.compute})")
    return out


def rounds_convention(rep: Reproduction, table: pd.DataFrame) -> str:
    """How the table's rounds-to-target count, beside run summaries and figures that count rounds from 1 (round 0
    is the initial model): an entry whose paper counts otherwise (FedSSO's r* - 1) is labelled."""
    shown = set(table["metric"]) if "metric" in table else set()
    metrics = [m for m in rep.metrics if m.is_rounds and m.name in shown]
    if not metrics:
        return ""
    parts = []
    for offset in dict.fromkeys(m.offset for m in metrics):
        names = ", ".join(m.name for m in metrics if m.offset == offset)
        parts.append(f"{names} = r* - {offset}, the paper's convention (r* = the first round, counting from 1, whose "
                     "value reaches the target; run summaries and figures show r*)" if offset else
                     f"{names} = the first round, counting from 1, whose value reaches the target")
    return "Rounds to target: " + "; ".join(parts) + "."


def seeds_rule(n: int) -> str:
    if n == 1:
        return "Claims (judged on 1 seed: one seed, the verdict may move with float rounding):"
    return (f"Claims (judged on {n} seeds: a claim about a mean holds on the mean and on at least {seeds_needed(n)} of the "
            f"{n} seeds, one that says \"every seed\" on every seed, one that says \"median\" on the median; a line that "
            "starts \"not the paper's claim\" checks the spec's proxy and is not counted among the paper's claims):")


def collapse_lines(table: pd.DataFrame) -> list[str]:
    if "after_target" not in table or not (table["after_target"] != "").any():
        return []
    head = (f"After the target round: each rounds-to-target's final and worst value over the seeds that reached it; "
            f"{COLLAPSE_RULE}.")
    return [head, *(["Collapses:", *collapses(table)] if collapses(table) else ["No run collapsed."])]


def report(rep: Reproduction, scale_name: str, table: pd.DataFrame, claims: list[Claim], seconds: float | None = None,
           tuning: pd.DataFrame | None = None, where: str | None = None, seed_note: str = "") -> str:
    scale = rep.scales[scale_name]
    lines = [f"## {rep.name} — {rep.title} (scale {scale_name})", ""]
    for text in intro(rep, scale_name, seconds, where, seed_note):
        lines += [text, ""]
    if tuning is not None and not tuning.empty:
        lines += [tuning_markdown(rep, scale, tuning), ""]
    if convention := rounds_convention(rep, table):
        lines += [convention, ""]
    lines += [to_markdown(table), ""]
    if after := collapse_lines(table):
        lines += [*after, ""]
    lines += [seeds_rule(len(scale.seeds))]
    lines += [claim_line(c, scale_name) for c in claims]
    return "\n".join(lines)


def claim_line(claim: Claim, scale_name: str) -> str:
    """'- [x] text (numbers)'; a claim that fails below the paper's scale says so: the scaled-down setting
    measured it and it did not hold, which is a result, not an error."""
    verdict = "" if claim.holds or scale_name == "full" else "does not hold at this scale: "
    detail = f" ({verdict}{claim.detail})" if claim.detail else (f" ({verdict.rstrip(': ')})" if verdict else "")
    narrower = f" NARROWER THAN THE PAPER: {claim.narrower}." if claim.narrower else ""
    return f"- [{'x' if claim.holds else ' '}] {claim.text}{narrower}{detail}"


def figure_marks(rep: Reproduction, jobs: list[Job]) -> Marks:
    """The figure's x axis, its metrics' targets and each arm's schedule switches (an algorithm key
    `<name>_schedule: [R, value]`: `value` from round R on, drawn at R)."""
    targets = tuple((m.source, float(m.target), m.only) for m in rep.metrics if m.is_rounds and m.target is not None)
    switches: dict[tuple[str, str], tuple[tuple[int, str], ...]] = {}
    for job in jobs:
        found = []
        for key, val in (job.cfg.get("algorithm") or {}).items():
            if str(key).endswith("_schedule") and not isinstance(val, str) and val is not None and len(val) == 2:
                found.append((int(val[0]), f"{str(key).removesuffix('_schedule')} {float(val[1]):g}"))
        switches[(job.arm.method, job.arm.group)] = tuple(found)
    return Marks("attack iteration" if rep.runner == "dlg" else "round", tuple(dict.fromkeys(targets)), switches)


SAVED = ("comparison.md", "comparison.csv", "figure.png", "page.html")  # what save() writes in the entry's folder


def check_saved(out: Path) -> None:
    """Before any training: each file save() will write in `out` is one it may replace (core.output_files)."""
    from fedbench.core.output_files import check_destination

    for name in SAVED:
        check_destination(out / name)


def save(rep: Reproduction, scale_name: str, runs, table, claims, out: Path, stamp: str, uri: str,
         seconds: float | None = None, tuning: pd.DataFrame | None = None, marks: Marks = Marks(),
         hashes: pd.DataFrame | None = None, where: str | None = None, seed_note: str = "") -> tuple[str, list[Path], Section]:
    markdown = report(rep, scale_name, table, claims, seconds, tuning, where, seed_note)
    files = [out / SAVED[0], out / SAVED[1]]
    write_output(files[0], markdown + "\n")
    write_output(files[1], to_csv_frame(table, tuning).to_csv(index=False))
    if tuning is not None and not tuning.empty:  # the figure draws each tuned method's winner
        chosen = set(zip(*(tuning.loc[tuning["chosen"], k] for k in ("method", "group", "setting"))))
        runs = [r for r in runs if not r.setting or (r.method, r.group, r.setting) in chosen]
    figure = plot_figure(runs, rep.plot, out / SAVED[2], f"{rep.name} (scale {scale_name})", rep.plot_log,
                         marks)
    if figure is not None:
        files.append(figure)
    section = outcome_section(rep, scale_name, table, claims, seconds, tuning, figure, hashes, where, seed_note)
    files.append(write_page(out / SAVED[3], f"fedbench reproduce {rep.name} --scale {scale_name}", [section],
                            provenance_rows=provenance({"MLflow store": uri, "MLflow runs": f"named {stamp}-*"})))
    log_comparison(rep, scale_name, files, claims, stamp, uri)
    return markdown, files, section


def outcome_section(rep: Reproduction, scale_name: str, table: pd.DataFrame, claims: list[Claim], seconds: float | None,
                    tuning: pd.DataFrame | None, figure: Path | None, hashes: pd.DataFrame | None,
                    where: str | None = None, seed_note: str = "") -> Section:
    """A reproduction's part of a results page, carrying what its Markdown carries: the paper's sentence, the
    setting, the seeds, each claim's verdict with its NARROWER THAN THE PAPER note, paper vs measured with its
    rounds-to-target convention, the collapses, the tuning grid, the figure, and the config hash of every run."""
    scale = rep.scales[scale_name]
    paragraphs = intro(rep, scale_name, seconds, where, seed_note) + collapse_lines(table)
    paragraphs.append(seeds_rule(len(scale.seeds)))
    convention = rounds_convention(rep, table)
    tables = [("Paper vs measured" + (f" ({convention.rstrip('.')})" if convention else ""), display_frame(table))]
    if tuning is not None and not tuning.empty:
        shown = tuning[[c for c in ("method", "group", "setting", "by", "shown", "chosen") if c in tuning]]
        tables.append(("Equal tuning: every candidate and the winner per method", shown))
    if hashes is not None and not hashes.empty:
        tables.append(("Runs and their config hashes", hashes))
    figures = [(f"{rep.name}: mean over seeds, band min to max", figure.read_bytes())] if figure is not None else []
    return Section(f"{rep.name}: {rep.title} (scale {scale_name})", paragraphs, tables, figures,
                   [(c.text + (f" NARROWER THAN THE PAPER: {c.narrower}." if c.narrower else ""), c.holds, c.detail)
                    for c in claims],
                   "does not hold" if scale_name == "full" else "does not hold at this scale")


def log_comparison(rep: Reproduction, scale_name: str, files: list[Path], claims: list[Claim], stamp: str, uri: str) -> None:
    """A run named `<stamp>-comparison` in the reproduction's experiment carries the artifacts."""
    from fedbench.tracking.store import open_store

    client, experiment_id = open_store(uri, rep.name)
    run = client.create_run(experiment_id, run_name=f"{stamp}-comparison",
                            tags={"reproduction": rep.name, "scale": scale_name,
                                  "claims_hold": str(all(c.holds for c in claims)).lower()})
    for path in files:
        client.log_artifact(run.info.run_id, str(path))
    client.set_terminated(run.info.run_id, "FINISHED" if all(c.holds for c in claims) else "FAILED")


def reproduce(rep: Reproduction, scale_name: str = "ci", extra: tuple[str, ...] = (), outputs: Path = OUTPUTS,
              seeds: tuple[int, ...] | None = None, jobs: int = 1) -> Outcome:
    """Run the scale's grid and compare; raises ConfigError/DataUnavailableError before any training.
    seeds: the reproduction's seeds instead of the scale's. jobs: lane groups trained at once in worker
    processes (run_grid). With several seeds, a verdict within one seed of flipping (compare.within_one_seed)
    is judged again on MIN_SEEDS seeds: the grid runs the next unused seeds."""
    scale = get_scale(rep, scale_name)
    refuse_own_keys(extra)
    if seeds is not None:
        rep = with_seeds(rep, scale_name, seeds)
        scale = rep.scales[scale_name]
    lacking = missing(rep, scale_name)
    if lacking:
        raise ConfigError(f"{rep.name} cannot run here: missing {', '.join(lacking)}")
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"  # two reproductions started in one second stay apart
    composer = CheckedComposer()
    grid = plan(rep, scale, stamp, extra, composer=composer)
    check_data(grid)
    out = outputs / rep.name
    check_saved(out / scale_name)
    started = time.perf_counter()
    runs, failures = run_grid(rep, scale, grid, out / "runs" / stamp, jobs)
    if not runs:
        raise FedbenchError(f"{rep.name}: no run finished ({'; '.join(failures)})")
    uri = tracking_uri(extra)
    flips: list[str] = []
    table, claims, tuning = evaluate(rep, scale_name, runs, flips)
    seed_note = ""
    if flips and 1 < len(scale.seeds) < MIN_SEEDS:
        before = scale.seeds
        more = tuple(s for s in range(max(before) + 1, max(before) + 1 + MIN_SEEDS) if s not in before)[:MIN_SEEDS - len(before)]
        print(f"[reproduce] {rep.name}: {len(flips)} verdict(s) within one seed of flipping on seeds "
              f"{seed_span(before)}; judging on {MIN_SEEDS} seeds (adding {seed_span(more)})", flush=True)
        rep = with_seeds(rep, scale_name, (*before, *more))
        scale = rep.scales[scale_name]
        added = plan(rep, scale, stamp, extra, seeds=more, composer=composer)
        new_runs, new_failures = run_grid(rep, scale, added, out / "runs" / stamp, jobs)
        runs, failures, grid = in_grid_order(scale, runs + new_runs), failures + new_failures, grid + added
        table, claims, tuning = evaluate(rep, scale_name, runs)
        seed_note = (f"the scale's {seed_span(before)}, extended to {MIN_SEEDS} because "
                     f"{'a verdict was' if len(flips) == 1 else f'{len(flips)} verdicts were'} within one seed of flipping "
                     f"on {len(before)} seeds: " + "; ".join(flips))
    if failures:
        claims.append(Claim("every job of the grid ran to the end", False, "failed: " + "; ".join(failures)))
    markdown, files, section = save(rep, scale_name, runs, table, claims, out / scale_name, stamp, uri,
                                    time.perf_counter() - started, tuning, figure_marks(rep, grid), config_hashes(grid),
                                    machine(extra), seed_note)
    return Outcome(table, claims, markdown, files, section)


def config_hashes(jobs: list[Job]) -> pd.DataFrame:
    from fedbench.runs.single import config_hash

    return pd.DataFrame([{"arm": job.arm.slug, "seed": job.seed, "config hash": config_hash(job.cfg)} for job in jobs])


def timed_reproduction(name: str, scale_name: str, extra: tuple[str, ...], outputs: Path,
                       seeds: tuple[int, ...] | None = None, jobs: int = 1) -> tuple[Outcome, float]:
    """One entry by name (in a worker process of `reproduce_all(jobs=...)`, or recorded alone) and the seconds it
    took."""
    from fedbench.reproduce.catalog import load_catalog

    started = time.perf_counter()
    outcome = reproduce(load_catalog()[name], scale_name, extra, outputs, seeds, jobs)
    return outcome, time.perf_counter() - started


def recorded_command(target: str, scale_name: str, extra: tuple[str, ...], record: bool, jobs: int,
                     seeds: tuple[int, ...] | None) -> str:
    """The command line a record names: `fedbench reproduce <entry or all> --scale ...` with its options and the
    overrides that change numbers (where it was recorded, tracking.*, changes none)."""
    shown = [o for o in extra if not o.startswith("tracking.")]
    return " ".join(["fedbench reproduce", target, "--scale", scale_name, *(["--record"] if record else []),
                     *([f"--jobs {jobs}"] if jobs > 1 else []), *([f"--seeds {seed_span(seeds)}"] if seeds else []),
                     *shown])


def reproduce_all(scale_name: str = "ci", extra: tuple[str, ...] = (), outputs: Path = OUTPUTS,
                  echo=print, record: bool = False, jobs: int = 1,
                  seeds: tuple[int, ...] | None = None) -> tuple[dict[str, Outcome | str], Path]:
    """Every reproduction with this scale that can run here, one after the other (jobs > 1: that many at once,
    each in a worker process of its own); the others are listed with the reason. Returns {name: outcome or why
    it did not run} and the summary file (Markdown).
    record: also write the outcome as the catalog's record and docs/results.md (reproduce.results)."""
    from fedbench.reproduce.catalog import load_catalog
    from fedbench.reproduce import results as recorded

    refuse_own_keys(extra)
    scales = sorted({name for rep in load_catalog().values() for name in rep.scales})
    if scale_name not in scales:  # it names the summary's file too: outputs/reproduce/all-<scale>.md
        raise unknown_choice("--scale", scale_name, scales)
    if record:
        recorded.docs_path()  # a checkout to record into, checked before hours of training
    from fedbench.core.output_files import check_destination

    for suffix in (".md", ".html"):  # the summary and its page (each entry's files: check_saved, as it starts)
        check_destination(outputs / f"all-{scale_name}{suffix}")
    results: dict[str, Outcome | str] = {}
    seconds: dict[str, float] = {}
    runnable = []
    for rep in load_catalog().values():
        if scale_name not in rep.scales:
            continue
        lacking = missing(rep, scale_name)
        if lacking:
            results[rep.name] = f"not run: missing {', '.join(lacking)}"
            continue
        results[rep.name] = "not run"  # the catalog's order, filled in below
        runnable.append(rep.name)
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            # one MLflow store per entry unless the command names one: SQLite takes one writer at a time
            own = any(o.startswith("tracking.uri=") for o in extra)
            stores = {name: () if own else (f"tracking.uri=sqlite:///{(outputs / name).resolve()}/mlflow.db",) for name in runnable}
            for name in runnable:
                (outputs / name).mkdir(parents=True, exist_ok=True)
            # the longest first (the scale's recorded compute), so that the workers finish together
            took = recorded.recorded(scale_name).groupby("reproduction")["seconds"].first().to_dict()
            futures = {name: pool.submit(timed_reproduction, name, scale_name, (*extra, *stores[name]), outputs, seeds)
                       for name in sorted(runnable, key=lambda n: -float(took.get(n, 1e9)))}
            done = {name: future.exception() or future.result() for name, future in futures.items()}
    for name in runnable:
        try:
            echo(f"[reproduce all] {name} --scale {scale_name}")
            outcome = done[name] if jobs > 1 else timed_reproduction(name, scale_name, extra, outputs, seeds)
            if isinstance(outcome, BaseException):
                raise outcome
            results[name], seconds[name] = outcome
            echo("\n".join(line for line in results[name].markdown.splitlines() if line.startswith("- [")))
        except (ConfigError, DataUnavailableError) as err:
            results[name] = f"not run: {err}"
    lines = [f"# fedbench reproduce all --scale {scale_name}", "", "| reproduction | claims that hold |", "|---|---|"]
    for name, result in results.items():
        held = result if isinstance(result, str) else paper_count(result.claims)
        lines.append(f"| {name} | {held} |")
    lines += [""] + [result.markdown + "\n" for result in results.values() if not isinstance(result, str)]
    summary = outputs / f"all-{scale_name}.md"
    write_output(summary, "\n".join(lines))
    command = recorded_command("all", scale_name, extra, record, jobs, seeds)
    page = all_page(outputs / f"all-{scale_name}.html", scale_name, results, command)
    echo(f"results page: {page}")
    if record:
        for path in recorded.record(scale_name, results, seconds, machine(extra), command):
            echo(f"recorded: {path}")
    return results, summary


def reproduce_and_record(rep: Reproduction, scale_name: str, extra: tuple[str, ...] = (), outputs: Path = OUTPUTS,
                         seeds: tuple[int, ...] | None = None, jobs: int = 1, echo=print) -> Outcome:
    """`fedbench reproduce ENTRY --record`: run the entry, then record it alone (reproduce.results.record): its rows
    and sections replace its own, every other entry's stay. The checkout to record into is checked first."""
    from fedbench.reproduce import results as recorded

    recorded.docs_path()  # before hours of training
    outcome, took = timed_reproduction(rep.name, scale_name, extra, outputs, seeds, jobs)
    command = recorded_command(rep.name, scale_name, extra, True, jobs, seeds)
    for path in recorded.record(scale_name, {rep.name: outcome}, {rep.name: took}, machine(extra), command):
        echo(f"recorded: {path}")
    return outcome


def all_page(path: Path, scale_name: str, results: dict[str, Outcome | str], command: str) -> Path:
    """One page for every reproduction of a scale: how many claims held per reproduction, then each one's
    section (tracking.page)."""
    overview = pd.DataFrame([{"reproduction": name, "claims that hold": result if isinstance(result, str) else
                              paper_count(result.claims)}
                             for name, result in results.items()])
    sections = [Section("Overview", [f"Every reproduction with a {scale_name} scale that runs here."],
                        [("", overview)])]
    sections += [r.section for r in results.values() if not isinstance(r, str) and r.section is not None]
    return write_page(path, f"fedbench reproduce all --scale {scale_name}", sections,
                      provenance_rows=provenance({"command": command}))
