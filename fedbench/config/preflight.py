"""Checks of a command line before Hydra runs anything: every job of a sweep is composed and
validated first, so a bad value in the 40th job stops the grid before the 1st job trains."""

from __future__ import annotations

import functools
import itertools
import math
import re
from pathlib import Path

from fedbench.config import suggest
from fedbench.config.compose import group_choices
from fedbench.config.plugins import installed_config_dirs
from fedbench.config.renames import renamed_message
from fedbench.core.errors import ConfigError

GROUPS = ("dataset", "partition", "model", "algorithm", "engine", "tracking", "experiment", "scale")
MAX_GRID_JOBS = 100_000  # a larger grid is refused, not checked for minutes


def top_level_keys() -> set[str]:
    """The keys a command line may set at the top: the schema's, plus the experiment and scale groups and hydra."""
    import dataclasses

    from fedbench.config.schema import RunConfig

    return {f.name for f in dataclasses.fields(RunConfig)} | {"experiment", "scale", "hydra"}


def extra_config_dirs(argv: list[str]) -> tuple[Path, ...]:
    """Hydra's --config-dir/-cd folders: more config groups, searched with the packaged ones."""
    return tuple(Path(v).absolute() for f, v in zip(argv, argv[1:]) if f in ("--config-dir", "-cd"))


def check_shadowed(conf_dir: Path, extra: tuple[Path, ...]) -> None:
    """A --config-dir yaml at the path of a packaged one (my_conf/algorithm/fedavg.yaml): Hydra reads the packaged
    file, first on its search path, and never the user's, so it is refused in one line, not ignored (a copy with
    the same text is harmless). So is a folder named almost as a group (my_conf/algorithms/), where Hydra never
    looks."""
    import difflib

    from fedbench.core.user_files import is_config_file

    for folder in extra:
        if folder.resolve() == conf_dir.resolve():
            continue
        for sub in sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in GROUPS):
            close = difflib.get_close_matches(sub.name, GROUPS, n=1, cutoff=0.8)
            if close and any(sub.rglob("*.yaml")):  # my_conf/algorithms/: Hydra would never look there
                raise ConfigError(f"{sub}: no config group is named {sub.name}; its yamls go in {folder / close[0]}/ "
                                  f"(the groups: {', '.join(GROUPS)})")
        for group in GROUPS:
            for mine in sorted((folder / group).rglob("*.yaml")):
                packaged = conf_dir / group / mine.relative_to(folder / group)
                if is_config_file(mine) and packaged.is_file() and packaged.read_bytes() != mine.read_bytes():
                    choice = mine.relative_to(folder / group).with_suffix("")
                    raise ConfigError(f"{mine}: {group}={choice} is a built-in of fedbench ({group}/{choice}.yaml), "
                                      f"whose file Hydra reads in place of yours; give yours a name of its own "
                                      f"(e.g. {group}/my_{choice.name}.yaml)")


def searchpath(extra: tuple[Path, ...]) -> list[str]:
    """The override that adds --config-dir folders to Hydra's search path (none without them)."""
    from fedbench.config.compose import quoted_value

    # file://<path> quoted (not as_uri: Hydra does not decode its %-escapes): a folder with `,` or spaces
    return [f"hydra.searchpath=[{','.join(quoted_value(f'file://{d}') for d in extra)}]"] if extra else []


def glob_values(override, options) -> list[str] | None:
    """The options a glob sweep (`algorithm=glob(fedavg/*)`) selects of its config group (None: no glob sweep).
    Hydra lists them with its config loader, which a grid listed before Hydra runs has not: its
    HydraException traceback ended the command line."""
    from hydra.core.override_parser.types import Glob

    if not isinstance(override.value(), Glob):
        return None
    key = override.get_key_element().lstrip("+~")
    if key not in GROUPS:
        raise ConfigError(f"{override.input_line}: glob() selects among a config group's options ({', '.join(GROUPS)}), "
                          f"and {key} is no group; list its values instead (a,b,c, range(...) or choice(...))")
    names = [n for n in options(key) if "/" not in n]  # Hydra's glob: the group's own options, not its subfolders'
    if not (selected := override.value().filter(names)):
        raise ConfigError(f"{override.input_line} selects none of {key}'s options ({', '.join(names) or 'none'}): "
                          f"glob() matches the names directly in conf/{key}/, not those in its subfolders "
                          f"({key}=a/b); list them instead, e.g. {key}=a/b,a/c")
    return selected


def sweep_length(override) -> int:
    """How many values a sweep override has, without listing them (`seed=range(0,10**9)` is a number)."""
    from hydra.core.override_parser.types import ChoiceSweep, RangeSweep

    value = override.value()
    if isinstance(value, RangeSweep):
        if not value.step:
            raise ConfigError(f"{override.input_line}: a range's step must not be 0 (range(start, stop, step))")
        return max(0, math.ceil((value.stop - value.start) / value.step))
    if isinstance(value, ChoiceSweep):
        return len(value.list)
    return sum(1 for _ in itertools.islice(override.sweep_string_iterator(), MAX_GRID_JOBS + 1))


def expand_jobs(overrides: list[str], options=None) -> list[list[str]]:
    """The override lists of every job of a basic-sweeper grid (one job without sweeps). A grid of more than
    MAX_GRID_JOBS jobs is refused from the lengths of its sweeps, before any job is listed: a typo such as
    `seed=range(0,100000000)` is one line at once, not minutes and gigabytes of override lists. `options(group)`
    lists a config group's options for a glob sweep (default: the packaged config's and installed plugins')."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hydra.core.override_parser.types import IntervalSweep

    if options is None:
        from fedbench.config.compose import conf_dir

        options = functools.cache(lambda group: group_choices(conf_dir(), group, installed_config_dirs()))
    parsed = OverridesParser.create().parse_overrides(overrides)
    for o in parsed:
        if isinstance(o.value(), IntervalSweep):
            raise ConfigError(f"{o.input_line} is an interval to search, which a grid cannot list: give values "
                              f"(choice(...), range(...) or a,b,c), or search it with hydra/sweeper=optuna")
    globbed = {id(o): g for o in parsed if (g := glob_values(o, options)) is not None}  # listed once, here
    sweeps = [o for o in parsed if o.is_sweep_override()]
    lengths = [(o.get_key_element(), len(globbed[id(o)]) if id(o) in globbed else sweep_length(o)) for o in sweeps]
    if empty := [o.input_line for o, (_, n) in zip(sweeps, lengths) if n == 0]:
        raise ConfigError(f"{empty[0]} lists no value: the grid has no job")
    if (size := math.prod(length for _, length in lengths)) > MAX_GRID_JOBS:
        axes = " x ".join(f"{key} ({length:,})" for key, length in lengths)
        raise ConfigError(f"a grid of {size:,} jobs ({axes}); at most {MAX_GRID_JOBS:,} are run from one command line "
                          "(each is checked before the first starts): split it, e.g. by seed or algorithm")
    axes = []
    for o in parsed:
        key = o.get_key_element()
        if id(o) in globbed:
            axes.append([f"{key}={v}" for v in globbed[id(o)]])
        elif o.is_sweep_override():
            axes.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            axes.append([o.input_line])
    return [list(job) for job in itertools.product(*axes)]


def checked_compose(overrides: list[str] | tuple[str, ...] = (), directory: Path | None = None):
    """The config `fedbench run OVERRIDES` would run, the command line first checked as `fedbench run`
    checks it (preflight: one ConfigError before any work)."""
    from fedbench.config.compose import compose, conf_dir

    directory = directory or conf_dir()
    preflight(directory, list(overrides))
    return compose(overrides, directory=directory)


def preflight(conf_dir: Path, argv: list[str]) -> None:
    """Raise ConfigError for the first bad value of any job; returns quietly otherwise. Each job is
    composed once (the first with Hydra's settings, for the output folder) and validated once."""
    from hydra.errors import OverrideParseException

    from fedbench.config.compose import compose
    from fedbench.config.validate import validate

    for flag in argv:  # the primary config is fedbench's: preflight, resume and the record all read conf/config.yaml
        name = flag.split("=")[0]
        if name in ("--config-name", "-cn", "--config-path", "-cp", "--experimental-rerun"):
            raise ConfigError(f"{name} is not a flag of fedbench run: its primary config is fedbench's own; add your "
                              "groups with --config-dir DIR (or FEDBENCH_CONF), continue a run with fedbench resume DIR "
                              "(fedbench run --hydra-help lists the flags it passes to Hydra)")
    if "--resolve" in argv and not {"--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i"} & set(argv):
        raise ConfigError("--resolve goes with --cfg or --help: it resolves the config they print "
                          "(fedbench run --cfg job --resolve)")
    check_flags(argv)
    overrides = hydra_overrides(argv)
    check_plugins(overrides)
    extra = extra_config_dirs(argv)
    check_shadowed(conf_dir, extra)
    search = searchpath(extra)
    multirun = "--multirun" in argv or "-m" in argv
    check_output_value([o for o in overrides if o.startswith(("hydra.run.", "hydra.sweep."))])
    if not multirun:
        check_no_grid(overrides)
    # Hydra's own settings (launcher, sweeper, hydra.* keys) are composed with the first job: Hydra's
    # errors become one line there, before Hydra runs anything
    placement = overrides_without_sweeps([o for o in overrides if o.lstrip("+~").startswith(("hydra.", "hydra/"))])
    # `+hydra.key` as `++hydra.key`: a launcher's config that Hydra loads only at launch may already hold the
    # key here (ray_cluster's ray.remote.*), where Hydra's own launch appends it without complaint
    placement = ["+" + o if o.startswith("+hydra.") else o for o in placement]
    if jobs_searched := any("hydra/sweeper=" in a or a.startswith("hydra.sweeper") for a in overrides):
        overrides = [a for a in overrides if not a.startswith("hydra")]  # a search: check the base config
        jobs = [overrides_without_sweeps(overrides)]
    installed = installed_config_dirs()  # the installed packages' plugins (hydra_plugins/fedbench_plugins)
    choices = functools.cache(lambda group: group_choices(conf_dir, group, (*extra, *installed)))
    if not jobs_searched:
        try:
            jobs = expand_jobs([a for a in overrides if not a.startswith(("hydra.", "hydra/"))], choices)
        except OverrideParseException as exc:
            raise parse_failure(exc, overrides) from None
    keys = top_level_keys()
    composer = JobComposer(conf_dir, search)
    for number, job in enumerate(jobs):
        for item in job:
            key, _, value = item.lstrip("+~").partition("=")
            root = key.split(".")[0].split("/")[0]
            if not item.startswith("+") and root not in keys:
                raise unknown_top_level_key(root, [o for o in job if o != item], keys, conf_dir, search, extra)
            if key in GROUPS and value not in ("null", "") and value not in choices(key):
                if message := renamed_message(key, value):
                    raise ConfigError(message)  # an old name (config.renames), unless a --config-dir has it
                raise suggest.unknown_choice(key, value, choices(key))  # fashion_mnist -> fmnist
        if number == 0:
            cfg = compose([*job, *search, *placement], return_hydra_config=True, directory=conf_dir)
            check_output_dir(cfg, multirun)
            check_output_subdir(cfg)
            if multirun:
                check_sweep_subdir(cfg)
            check_plugin_options(cfg)
        else:
            cfg = composer(job)
        validate(cfg)


REFUSED_FLAGS = ("--config-name", "--config-path", "--experimental-rerun", "--shell-completion")  # see preflight


def check_flags(argv: list[str]) -> None:
    """The command line as Hydra's parser reads it, its error (an unknown flag, --cfg nope) as one line: argparse
    printed its usage, eight lines, and exited."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    flags = sorted(f for action in parser._actions for f in action.option_strings
                   if f.startswith("--") and f not in REFUSED_FLAGS)

    def error(message: str):
        if message.startswith("unrecognized arguments: "):  # argparse's other messages name the valid choices
            best = suggest.closest(message.split()[2].lstrip("-"), [f[2:] for f in flags])  # --multirn: --multirun
            message += (f". Its flags: {', '.join(flags)}; the rest of its command line is key=value overrides."
                        + (f" Did you mean '--{best}'?" if best else ""))
        raise ConfigError(f"fedbench run: {message}")

    parser.error = error  # argparse reports every error through it
    parser.parse_args(argv)


def unknown_top_level_key(root: str, rest: list[str], keys: set[str], conf_dir: Path, search: list[str],
                          extra: tuple[Path, ...]) -> ConfigError:
    """`mu=0.1`: the valid top-level keys, and the key one level down that the user meant (algorithm.mu:
    in the job's config, composed without the key, or in the group files that have it)."""
    from omegaconf import OmegaConf

    from fedbench.config.compose import compose

    try:
        config = OmegaConf.to_container(compose([*rest, *search], directory=conf_dir), resolve=False)
    except Exception:  # noqa: BLE001 - the rest of the job has an error of its own: suggest from the files
        config = None
    hint = suggest.one_level_down(root, config, conf_dir, ("algorithm", "partition", "dataset", "model", "engine",
                                                           "tracking"), extra)
    valid = sorted(keys - {"hydra"})
    return ConfigError(f"Unknown top-level key {root!r}. Available: {', '.join(valid)}."
                       + (hint or suggest.did_you_mean(root, valid)))


def set_values(cfg, overrides) -> bool:
    """Hydra's own application of value overrides to a composed config, in place and in order
    (ConfigLoaderImpl._apply_overrides_to_config: OmegaConf.update with merge=True, after the config files are
    merged). False where the key is absent or Hydra would raise: its composition then reports it."""
    from omegaconf import OmegaConf

    for o in overrides:
        if OmegaConf.select(cfg, o.key_or_group, default=_ABSENT) is _ABSENT:
            return False
        try:
            OmegaConf.update(cfg, o.key_or_group, o.value(), merge=True)
        except Exception:  # noqa: BLE001 - Hydra's composition reports it in its words
            return False
    return True


_ABSENT = object()


class JobComposer:
    """The configs of a grid's jobs, each as Hydra composes it, without composing each one (a second
    with Hydra): the jobs that choose the same config files share one composition, and their plain
    values (key=value) are set on a copy of it (set_values). Anything else (+key, ~key, a value the composed
    config does not take) is composed by Hydra, whose error is the one to report. `composer` composes a
    command line (default: config.compose.compose from conf_dir)."""

    def __init__(self, conf_dir: Path, search: list[str], composer=None):
        self.conf_dir, self.search = conf_dir, search
        self.compose = composer or self._compose
        self.bases: dict[tuple[str, ...], object] = {}

    def _compose(self, overrides: list[str]):
        from fedbench.config.compose import compose

        return compose(overrides, directory=self.conf_dir)

    @staticmethod
    def files(job: list[str]) -> tuple[str, ...]:
        """The overrides that choose or change config files (the rest are plain values)."""
        return tuple(o for o in job if o[0] in "+~" or "/" in o.split("=", 1)[0] or o.split("=", 1)[0] in GROUPS)

    def __call__(self, job: list[str]):
        from hydra.core.override_parser.overrides_parser import OverridesParser

        files = self.files(job)
        values = [o for o in job if o not in files]
        try:
            if files not in self.bases:
                self.bases[files] = self.compose([*files, *self.search])
            cfg = self.bases[files].copy()
            if set_values(cfg, OverridesParser.create().parse_overrides(values)):
                return cfg
        except Exception:  # noqa: BLE001 - Hydra's own composition reports it (or takes it)
            pass
        return self.compose([*job, *self.search])


class CheckedComposer:
    """checked_compose of many command lines (a reproduction's jobs: seeds and step sizes differ in values
    only): the first job of each set of config files is composed and checked as `fedbench run` checks a
    command line; the others are JobComposer's configs, their values checked as `fedbench run` checks them."""

    def __init__(self, directory: Path | None = None):
        from fedbench.config.compose import conf_dir

        self.directory = directory or conf_dir()
        self.composer = JobComposer(self.directory, [])
        self.checked: set[tuple[str, ...]] = set()

    def __call__(self, overrides: list[str]):
        from fedbench.config.validate import validate

        files = JobComposer.files(overrides)
        if files not in self.checked:
            cfg = checked_compose(overrides, self.directory)
            self.checked.add(files)
            return cfg
        cfg = self.composer(overrides)
        validate(cfg)
        return cfg


def parse_failure(exc: Exception, overrides: list[str]) -> ConfigError:
    """Hydra's parse error as one line (`-m eta_l=choice()` printed three: the override, the reason, a link); an
    unquoted value with a character beyond ASCII (tracking.run_name=café), which Hydra's grammar takes only quoted,
    says so (Hydra's LexerNoViableAltException named no fix)."""
    lines = [line.strip() for line in str(exc).splitlines()  # not its link, nor a line of carets under the input
             if line.strip(" ^") and not line.startswith("See https://")]
    message = f"cannot parse the overrides: {'; '.join(lines)}"
    unquoted = [o for o in overrides if not o.isascii() and o.partition("=")[2][:1] not in ("'", '"')]
    if unquoted:
        key, _, value = unquoted[0].partition("=")
        message += f"; a value with characters beyond ASCII is taken quoted: {key}='{value}'"
    return ConfigError(message)


def check_no_grid(overrides: list[str]) -> None:
    """A sweep's values (`seed=0,1`) on a command line without -m: Hydra's three-way question, as one line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as exc:
        raise parse_failure(exc, overrides) from None
    for o in parsed:
        if o.is_sweep_override():
            raise ConfigError(f"{o.input_line} is a grid of values: add -m to run a grid (fedbench run -m ...), "
                              f"or write {o.get_key_element()}=[...] for a list")


# What is valid beyond the type for Hydra plugins' options (keyed as on the command line).
PLUGIN_SPECS = {"hydra.launcher.max_batch": dict(ge=0, hint="0: as many as fit in half the free memory")}


def check_plugin_options(cfg) -> None:
    """The launcher's and sweeper's options against their class's signature (types, unknown keys) and
    PLUGIN_SPECS' ranges: a plugin would fail with a traceback in the middle of Hydra's start."""
    import importlib

    from omegaconf import OmegaConf

    from fedbench.config.checker import check_group
    from fedbench.config.schema import Spec

    specs = {k: Spec(**v) for k, v in PLUGIN_SPECS.items()}
    for kind in ("launcher", "sweeper"):
        try:
            options = OmegaConf.to_container(cfg.hydra[kind], resolve=True)
            module, _, name = str(options.pop("_target_")).rpartition(".")
            factory = getattr(importlib.import_module(module), name)
        except Exception:  # an interpolation of the job's, a plugin's config without a class: Hydra checks it
            continue
        check_group(f"hydra.{kind}", name, options, factory, skip=0, specs=specs)


def check_output_value(placement: list[str]) -> None:
    """A run (or sweep) folder that is the current folder."""
    for o in placement:
        key, _, value = o.partition("=")
        if key in ("hydra.run.dir", "hydra.sweep.dir") and value.strip() in ("", ".", "./"):
            raise ConfigError(f"{key}={value!r} would write the run's checkpoint and .hydra/ into the current folder; "
                              f"name a folder of its own, e.g. {key}=outputs/my_run")


def check_output_dir(cfg, multirun: bool) -> None:
    """The run (or sweep) folder of a config composed with Hydra's settings must be creatable:
    Hydra would fail with a traceback."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        folder = Path(str(cfg.hydra.sweep.dir if multirun else cfg.hydra.run.dir))
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0]
        if multirun and (per_job := re.search(r"hydra\.job\.(num|id)\b", first)):
            raise ConfigError(f"hydra.sweep.dir cannot use ${{{per_job.group(0)}}}: the sweep's folder is made before "
                              "its jobs, one for all; put it in hydra.sweep.subdir (each job's folder)") from None
        if re.search(r"hydra\.(job|runtime)\b", first):  # a value Hydra sets as the job starts (override_dirname)
            return
        raise ConfigError(f"cannot resolve {key}: {first}") from None
    try:
        _check_output_dir(cfg, folder, key, multirun)
    except (OSError, RuntimeError) as exc:  # a name too long, a loop of links: what creating it would meet
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot create the output folder {folder}: {why}; set {key}") from None


def check_sweep_subdir(cfg) -> None:
    """Every job of a sweep writes into a folder of its own inside the sweep folder: a hydra.sweep.subdir that
    leaves it (`..`, an absolute path) would put a job's record and checkpoint into another run's folder (an
    interrupted run's checkpoint overwritten), and one without a per-job part (${hydra.job.num}) puts every job
    into one folder, each overwriting the one before."""
    from pathlib import PurePosixPath

    from omegaconf import OmegaConf

    raw = str(OmegaConf.to_container(cfg.hydra.sweep, resolve=False).get("subdir"))
    default = "e.g. hydra.sweep.subdir=${hydra.job.num} (the default)"
    if raw.startswith("/") or ".." in PurePosixPath(raw).parts:
        raise ConfigError(f"hydra.sweep.subdir={raw!r} leaves the sweep folder: each job's folder must be inside "
                          f"hydra.sweep.dir; {default}")
    if "${" not in raw:
        raise ConfigError(f"hydra.sweep.subdir={raw!r} names one folder for every job of the sweep: each would "
                          f"overwrite the record of the one before; give each job its own, {default}")


def check_output_subdir(cfg) -> None:
    """Hydra's record of a run (config, overrides, fedbench's record) in the run folder's .hydra/, where `fedbench resume`
    reads it and the run folder's checks cover it: another folder (`../x`: beside the run folder, shared by every run,
    each overwriting the record of the one before) left the run without its record."""
    from omegaconf import OmegaConf

    from fedbench.core.ownership import HYDRA_SUBDIR

    value = OmegaConf.to_container(cfg.hydra, resolve=False).get("output_subdir")  # as written: it is not resolved yet
    if value is not None and str(value) != HYDRA_SUBDIR:
        raise ConfigError(f"hydra.output_subdir={str(value)!r}: fedbench keeps a run's record in its folder's "
                          f"{HYDRA_SUBDIR}/ (fedbench resume reads it there); use hydra.output_subdir={HYDRA_SUBDIR} (the "
                          "default), or null for no record")


def _check_output_dir(cfg, folder: Path, key: str, multirun: bool) -> None:
    import os

    if folder.resolve() == Path.cwd().resolve():  # resolved: `$PWD`, `./.`, `outputs/..` are the current folder too
        raise ConfigError(f"{key}={str(folder)!r} is the current folder: the run's checkpoint and .hydra/ would be "
                          f"written into it; name a folder of its own, e.g. {key}=outputs/my_run")
    from omegaconf import OmegaConf

    from fedbench.core.ownership import JOB_NAME, check_entries

    job_name = str(OmegaConf.select(cfg, "hydra.job.name", default=JOB_NAME) or JOB_NAME)
    if "/" in job_name or job_name in (".", ".."):  # it names the job's log file in its folder
        raise ConfigError(f"hydra.job.name={job_name!r} must be a file name (it names the job's log, <name>.log, in "
                          "its folder): no '/', not '.' or '..'")
    check_entries(folder, log_names=tuple({JOB_NAME, job_name}))  # links, FIFOs, others' files: before Hydra writes
    existing = folder.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"cannot create the output folder {folder}: {existing} is a file; set {key}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot create the output folder {folder}: {existing} is not writable; set {key}")
    import tempfile

    try:  # root passes os.access anywhere, and /proc or /sys refuse only the folder itself: a folder made and removed
        os.rmdir(tempfile.mkdtemp(prefix=".fedbench-probe-", dir=existing))
    except OSError as exc:
        raise ConfigError(f"cannot create the output folder {folder}: {existing} takes no new folder "
                          f"({exc.strerror or exc}); set {key}") from None
    from fedbench.core.ownership import check_free

    check_free(folder, "sweep directory" if multirun else "run directory", resume=multirun or bool(cfg.get("resume")))


_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-name", "-cn", "--config-path", "-cp",
                     "--config-dir", "-cd", "--experimental-rerun"}


def hydra_overrides(argv: list[str]) -> list[str]:
    """The key=value overrides of a Hydra command line, without its flags and their values."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a.startswith("-"):
            skip = a in _FLAGS_WITH_VALUE
        else:
            out.append(a)
    return out


def overrides_without_sweeps(overrides: list[str]) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [o.input_line for o in parsed if not o.is_sweep_override()]


# Hydra plugins a command line may select, with what installs them.
PLUGINS = {
    ("launcher", "joblib"): ("hydra_plugins.hydra_joblib_launcher", "pip install -e '.[sweeps]' (in a checkout; or the extra sweeps of fedbench-bench)"),
    ("sweeper", "optuna"): ("hydra_plugins.hydra_optuna_sweeper", "pip install -e '.[tune]' (in a checkout; or the extra tune of fedbench-bench)"),
    ("launcher", "ray_cluster"): ("hydra_plugins.hydra_ray_launcher", "bash scripts/install_ray.sh"),
    ("launcher", "submitit_slurm"): ("hydra_plugins.hydra_submitit_launcher", "pip install hydra-submitit-launcher"),
    ("launcher", "submitit_local"): ("hydra_plugins.hydra_submitit_launcher", "pip install hydra-submitit-launcher"),
}


def check_plugins(overrides: list[str]) -> None:
    """A launcher or sweeper whose plugin is not installed: one line naming what installs it."""
    import importlib.util

    for item in overrides:
        key, _, value = item.lstrip("+~").partition("=")
        if key in ("hydra/launcher", "hydra/sweeper"):
            kind = key.split("/")[1]
            plugin = PLUGINS.get((kind, value))
            if plugin is not None and importlib.util.find_spec(plugin[0]) is None:
                raise ConfigError(f"{key}={value} needs a Hydra plugin that is not installed: {plugin[1]}")
