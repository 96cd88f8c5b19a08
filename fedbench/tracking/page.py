"""One self-contained HTML results page (`fedbench report --format html`, `fedbench reproduce`): opens from
disk with no server and no network. Its CSS and the few lines of JS that sort a table by a clicked header
are inline, figures are embedded as base64 PNG; tables are pandas Stylers, the page a jinja2 template
(templates/results.html.j2)."""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass
class Section:
    """A part of the page: a heading, paragraphs, tables (caption, DataFrame: sortable), figures (caption,
    PNG bytes) and claims (text, held, the numbers it was judged on)."""

    heading: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    figures: list[tuple[str, bytes]] = field(default_factory=list)
    claims: list[tuple[str, bool, str]] = field(default_factory=list)
    not_held: str = "does not hold"  # below a paper's scale: "does not hold at this scale"


def table_html(table: pd.DataFrame, where: str = "") -> str:
    """A table as HTML (pandas Styler, cells escaped), marked sortable for the page's script. Its id
    comes from where it sits (`where`: its section and caption) and what it holds, not from pandas'
    random one: a page made again from the same record is the same file, and a diff shows what changed."""
    from pandas.io.formats.style import Styler

    show = table.astype(str) if not table.empty else table
    uuid = hashlib.sha256(f"{where}\0{show.to_csv()}".encode()).hexdigest()[:12]
    styler = Styler(show, uuid=uuid, cell_ids=False).hide(axis="index").format(escape="html").format_index(
        escape="html", axis=1)
    return styler.to_html(table_attributes='class="sortable"')


def figure_src(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def provenance(extra: dict[str, str] | None = None) -> dict[str, str]:
    """What made the page: fedbench's version, the source commit where there is one, the date."""
    from fedbench.tracking.recorder import git_commit, package_version

    return {"fedbench version": package_version(), "git commit": git_commit(),
            "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"), **(extra or {})}


def environment():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=jinja2.select_autoescape(["j2"]))
    env.filters["table_html"] = lambda t, where="": jinja2.utils.markupsafe.Markup(table_html(t, where))
    env.filters["figure_src"] = figure_src
    return env


def render(title: str, sections: list[Section | str], settings: dict[str, str] | None = None,
           provenance_rows: dict[str, str] | None = None) -> str:
    """The page; a section given as a string is one render_section made earlier (a recorded entry's), as it is."""
    return environment().get_template("results.html.j2").render(
        title=title, sections=sections, settings=settings or {}, provenance=provenance_rows or provenance())


def render_section(section: Section) -> str:
    """One section's HTML, as the page writes it (redacted): kept to build pages from later (reproduce.results)."""
    from fedbench.core.secrets import redact

    return redact(environment().get_template("section.html.j2").render(section=section)).strip("\n")


def write_page(path: Path, title: str, sections: list[Section | str], settings: dict[str, str] | None = None,
               provenance_rows: dict[str, str] | None = None) -> Path:
    from fedbench.core.secrets import redact

    from fedbench.core.output_files import write_output

    rows = {k: redact(str(v)) for k, v in (provenance_rows or provenance()).items()}  # the command line may hold one
    return write_output(path, redact(render(title, sections, settings, rows)))


def shared_settings(frame: pd.DataFrame) -> dict[str, str]:
    """The params every run of the frame shares (one value, recorded by all), placement aside."""
    from fedbench.tracking.report import PLACEMENT

    cols = [c for c in frame if c.startswith("param:") and not c[6:].startswith(PLACEMENT)]
    return {c[6:]: str(frame[c].iloc[0]) for c in sorted(cols) if frame[c].notna().all() and frame[c].nunique() == 1}


def report_page(path: Path, frame: pd.DataFrame, table: pd.DataFrame, settings: list[str], experiment: str,
                filter_string: str, uri: str | None, command: str) -> Path:
    """`fedbench report --format html`: the table, the test-accuracy curves (mean ± std over seeds per
    method, its own hyperparameters and setting), the runs with their config hashes, the shared settings and the provenance.
    `frame`: the runs, labelled (report.labelled)."""
    import pandas as pd

    from fedbench.tracking.plots import comparison_figure, figure_png
    from fedbench.tracking.report import metric_curves, shared_heading
    from fedbench.tracking.store import resolve_tracking_uri

    heading = shared_heading(frame)
    intro = [f"{len(frame)} FINISHED runs of experiment {experiment!r}" + (f" matching {filter_string!r}" if filter_string
             else "") + ". One row per method and setting; mean ± sample standard deviation over seeds.",
             "Settings (the keys that vary across these runs): " + (", ".join(settings) or "none") + "."]
    figures = []
    curves = metric_curves(frame, uri, "test_accuracy")
    if not curves.empty:
        figures.append(("Test accuracy per round: mean over seeds, band ± one sample standard deviation.",
                        figure_png(comparison_figure(curves, "test_accuracy", "round", heading))))
    runs = pd.DataFrame({
        "method": frame["algorithm"], "hyperparameters": frame["hyperparameters"], "setting": frame["setting"],
        "seed": frame.get("param:seed"),
        "final accuracy": frame["final_accuracy"].map(lambda v: "" if pd.isna(v) else f"{v:.4f}"),
        "config hash": frame.get("tag:config_hash"), "MLflow run": frame["run_id"],
    }).sort_values(["method", "setting", "seed"])
    runs = runs.drop(columns=[c for c in ("hyperparameters", "setting") if (runs[c] == "").all()])  # nothing to say
    sections = [Section("Results", intro, [("", table)], figures),
                Section("Runs", [f"Each run's config hash (the resolved config, placement aside) and its MLflow run "
                                 f"in {resolve_tracking_uri(uri)}."], [("", runs)])]
    commits = sorted(set(frame.get("tag:git_commit", pd.Series(dtype=str)).dropna()))
    versions = sorted(set(frame.get("tag:fedbench_version", pd.Series(dtype=str)).dropna()))
    rows = provenance({"command": command, "runs recorded by fedbench": ", ".join(versions) or "unknown",
                       "runs recorded at commit": ", ".join(commits) or "unknown"})
    return write_page(path, f"fedbench report: {experiment}" + (f" ({heading})" if heading else ""), sections,
                      shared_settings(frame), rows)
