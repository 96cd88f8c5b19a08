"""The README leads to a results table and the documentation site builds: the README's comparison runs as
written, it names every algorithm, its links resolve, and `mkdocs build --strict` (warnings as errors: a
broken link or anchor, a page missing from the nav) passes. LICENSE and CITATION.cff are at the top."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib

import pytest
import yaml

from tests.faultkit import ROOT, env

README = (ROOT / "README.md").read_text()


def section(text: str, heading: str) -> str:
    """The body of the `## heading...` section of a Markdown text, up to the next `## `."""
    start = next(m.end() for m in re.finditer(r"^## (.*)$", text, re.M) if m.group(1).startswith(heading))
    end = re.search(r"^## ", text[start:], re.M)
    return text[start:start + end.start()] if end else text[start:]


def code_lines(text: str) -> list[str]:
    """The lines of the first ```bash block of a text."""
    return re.search(r"```bash\n(.*?)```", text, re.S).group(1).strip().splitlines()


def test_the_docs_site_builds_with_warnings_as_errors(tmp_path):
    site = tmp_path / "site"
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                            "-d", str(site)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def pages(entries):
        for entry in entries:
            for value in entry.values():
                yield from pages(value) if isinstance(value, list) else [value]

    named = set(pages(nav))
    # every Markdown page in docs/ is in the nav (the build also warns on an omitted one) and was rendered
    assert named == {p.name for p in (ROOT / "docs").glob("*.md")}
    for page in named - {"index.md"}:
        assert (site / page.removesuffix(".md") / "index.html").is_file(), page


def test_the_readmes_first_screen_leads_from_set_up_to_a_results_table():
    headings = re.findall(r"^## (.*)$", README, re.M)
    order = ["Set-up", "Compare three methods", "Algorithms and their papers", "Where everything else lives"]
    found = [next(i for i, h in enumerate(headings) if h.startswith(o)) for o in order]
    assert found == sorted(found), headings
    # the comparison's table, plot and page come within the first screen or two, not at line 273
    compare = code_lines(section(README, "Compare three methods"))
    assert [line.split()[:2] for line in compare] == [["fedbench", "run"], ["fedbench", "report"],
                                                      ["fedbench", "plot"], ["fedbench", "report"]]
    assert README.index("fedbench plot") < README.index("## Algorithms")
    assert README[:README.index("## Compare")].count("\n") < 45
    set_up = section(README, "Set-up")
    assert "python3 -m venv .venv && source .venv/bin/activate" in set_up
    assert "python3 -m pip install -e . && fedbench run" in set_up
    # .ci/run runs the README's test command, so the README's two set-up steps stay what CI does
    assert "bash scripts/install_test_deps.sh && python3 -m pytest -q" in set_up
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/install_test_deps.sh" in ci and "python3 -m pytest -q" in ci


def test_the_readme_names_every_algorithm_with_its_paper():
    table = section(README, "Algorithms and their papers")
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`([\w/]+)`", row.split("|")[1])}
    shipped = {p.relative_to(ROOT / "conf" / "algorithm").with_suffix("").as_posix()
               for p in (ROOT / "conf" / "algorithm").rglob("*.yaml")}
    assert named == shipped, (sorted(shipped - named), sorted(named - shipped))
    for row in rows:
        assert row.rstrip(" |").split("|")[-1].strip(), f"no paper: {row}"


def test_every_relative_link_of_the_readme_resolves():
    # mkdocs checks the links between pages; the README is outside the site, so its links are checked here
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert links
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert not missing, missing


def test_license_and_citation_cff_are_at_the_top():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    # CFF 1.2.0's required keys, and the authors as its schema has them (a person or an entity)
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title"):
        assert isinstance(cff[key], str) and cff[key].strip(), key
    assert cff["authors"] and all(isinstance(a, dict) and ("name" in a or "family-names" in a)
                                  for a in cff["authors"])
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert cff["version"] == project["version"] and cff["license"] == "MIT"


@pytest.mark.slow
def test_the_readmes_comparison_runs_as_written(tmp_path):
    """The four commands, word for word (the `fedbench` command as `python -m fedbench.cli` of this checkout)."""
    outputs = []
    for line in code_lines(section(README, "Compare three methods")):
        words = shlex.split(line)
        assert words[0] == "fedbench"
        out = subprocess.run([sys.executable, "-m", "fedbench.cli", *words[1:]], cwd=tmp_path, env=env(),
                             capture_output=True, text=True, timeout=1200)
        assert out.returncode == 0, (line, out.stderr[-3000:])
        outputs.append(out.stdout)
    rows = [[cell.strip() for cell in row.strip("|").split("|")] for row in outputs[1].splitlines()
            if row.startswith("|") and not row.startswith("|---")]
    header, body = rows[0], rows[1:]
    # one row per method (its hyperparameters may follow its name), each over the three seeds
    assert [row[header.index("algorithm")].split()[0] for row in body] == ["fedavg", "fedprox", "scaffold"], outputs[1]
    assert [row[header.index("seeds")] for row in body] == ["3", "3", "3"], outputs[1]
    for made in ("figs/compare.png", "figs/compare.pdf", "compare.html"):
        assert (tmp_path / made).stat().st_size > 0, made
    assert "scaffold" in (tmp_path / "compare.html").read_text()
