"""Help that helps: console commands, the harness's own ``--help`` text, composition unchanged.

Everything runs for real: the installed console scripts and ``python -m harness`` as subprocesses,
the help's example overrides through Hydra's compose API.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module

import harness.configs

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = Path(harness.configs.__file__).parent
SCRIPTS = {"recsys-harness": "harness.__main__:main", "recsys-metrics": "metrics.cli:main"}
# The exit codes README's "Running an experiment" promises (read independently below).
EXIT_CODES = {0, 1, 2, 3, 10, 11, 12, 130, 143}


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command to completion, capturing text output."""
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, check=False)


@functools.cache
def harness_help(*overrides: str) -> str:
    """`python -m harness [overrides] --help`, checked to exit 0 with nothing on stderr (cached)."""
    done = run(sys.executable, "-m", "harness", *overrides, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def section(text: str, title: str) -> str:
    """The lines of the help between the header `== title ==` and the next header."""
    match = re.search(rf"^== {re.escape(title)}\b[^\n]*==\n(.*?)(?=^== |\Z)", text, re.M | re.S)
    assert match, f"no section {title!r} in the help"
    return match.group(1)


def group_options() -> dict[str, list[str]]:
    """Every config group on disk and its options (the YAML files), as Hydra would list them."""
    return {
        d.name: sorted(p.stem for p in d.glob("*.yaml"))
        for d in CONFIG_DIR.iterdir()
        if d.is_dir() and d.name != "hydra" and any(d.glob("*.yaml"))
    }


# ------------------------------------------------------------------------- console commands


def test_console_scripts_are_declared_and_installed() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert declared == SCRIPTS
    installed = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    for name, target in SCRIPTS.items():
        assert installed.get(name) == target, f"{name} not installed: run pip install -e ."


@pytest.fixture(scope="module")
def scripts_dir() -> Path:
    """Where pip put this interpreter's console scripts; skip when they are not there."""
    where = Path(sysconfig.get_path("scripts"))
    missing = [n for n in SCRIPTS if not (where / n).is_file()]
    if missing:
        pytest.skip(f"console scripts {missing} not in {where} (installed elsewhere)")
    return where


def test_recsys_harness_help(scripts_dir: Path, tmp_path: Path) -> None:
    done = run(str(scripts_dir / "recsys-harness"), "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("recsys-harness (also: python -m harness)")
    assert "== Exit codes ==" in done.stdout
    assert not (tmp_path / "runs").exists()  # help runs nothing


def test_recsys_metrics_help_and_exit_code(scripts_dir: Path, tmp_path: Path) -> None:
    done = run(str(scripts_dir / "recsys-metrics"), "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and "--output" in done.stdout
    # The wrapper hands main()'s return value to the shell: bad input is exit 2, one line.
    bad = run(str(scripts_dir / "recsys-metrics"), "nope.qrels", "nope.run", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error:") and bad.stderr.count("\n") == 1
    # And a real evaluation: one user, relevant item ranked first of two, so P@1 = 1, P@2 = 0.5.
    (tmp_path / "q.txt").write_text("u1 0 a 1\n")
    (tmp_path / "r.txt").write_text("u1 Q0 a 1 2.0 x\nu1 Q0 b 2 1.0 x\n")
    ok = run(
        str(scripts_dir / "recsys-metrics"), "q.txt", "r.txt", "-m", "P_1", "P_2", cwd=tmp_path
    )
    assert ok.returncode == 0, ok.stderr
    values = dict(re.findall(r"^(P_\d)\s+([\d.]+)$", ok.stdout, re.M))
    assert {k: float(v) for k, v in values.items()} == {"P_1": 1.0, "P_2": 0.5}


# ------------------------------------------------------------------------------ --help text


def test_help_replaces_hydra_stock_text() -> None:
    text = harness_help()
    assert "is powered by Hydra" not in text
    assert text.startswith("recsys-harness (also: python -m harness): offline evaluation")
    for title in ("Config groups", "Common overrides", "Where results go", "Exit codes"):
        section(text, title)


def test_help_names_every_group_and_its_options() -> None:
    text = harness_help()
    described = section(text, "Config groups")
    for group, opts in group_options().items():
        assert re.search(rf"^  {group} +\S", described, re.M), f"group {group} not described"
        assert f"\n{group}: {', '.join(opts)}\n" in described, f"options of {group} not listed"


def test_help_shows_the_selection_with_overrides() -> None:
    assert "model=['random', 'popularity', 'item_knn']" in harness_help()
    text = harness_help("split=leave_one_out", "model=[als,bias]", "gate=strict")
    assert "split=leave_one_out" in text and "model=['als', 'bias']" in text
    assert "gate=strict" in text


def test_help_exit_codes_match_the_readme() -> None:
    listed = section(harness_help(), "Exit codes")
    in_help = {int(c) for c in re.findall(r"(?:^ {2}|, |; )(\d+) ", listed, re.M)}
    readme = (ROOT / "README.md").read_text()
    paragraph = readme[readme.index("Exit codes: 0 success") :].split("\n\n")[0]
    in_readme = {int(c) for c in re.findall(r"(?<![\w.-])\d+(?![\w.%-])", paragraph)}
    assert in_readme == EXIT_CODES, paragraph
    assert in_help == EXIT_CODES


def test_help_overrides_compose() -> None:
    """Every example override in the help composes with the real config tree."""
    lines = section(harness_help(), "Common overrides").splitlines()
    examples = [re.split(r" {2,}", line.strip())[0] for line in lines if line.strip()]
    assert len(examples) >= 8
    composed = 0
    for example in examples:
        args = shlex.split(example)
        if any(a.startswith("-") for a in args):  # Hydra flags (multirun, --config-dir)
            continue
        with initialize_config_module(config_module="harness.configs", version_base=None):
            cfg = compose(config_name="config", overrides=args)
        for arg in args:
            key, value = arg.split("=", 1)
            if "." in key:  # a value override lands where it says
                node = cfg
                for part in key.split("."):
                    node = node[part]
                assert node == yaml.safe_load(value), example
        composed += 1
    assert composed >= 8


# ------------------------------------------------------------------- composition unchanged


def test_normal_composition_still_works(tmp_path: Path) -> None:
    done = run(
        sys.executable,
        "-m",
        "harness",
        "--cfg",
        "job",
        "split=user_time",
        "metrics.k=7",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    job = yaml.safe_load(done.stdout)
    assert job["split"]["method"] == "user_time" and job["metrics"]["k"] == 7
    assert set(job) >= {"dataset", "split", "model", "metrics", "tracking", "engine", "name"}
    assert "hydra" not in job  # the help config stays in Hydra's node
    with initialize_config_module(config_module="harness.configs", version_base=None):
        cfg = compose(config_name="config", return_hydra_config=True)
    assert cfg.hydra.help.app_name == "recsys-harness"
    assert cfg.hydra.runtime.choices["hydra/help"] == "harness"


def test_help_into_a_reader_that_stops_early_prints_no_traceback() -> None:
    """``--help | head -1``: the reader is gone before the help is written (its end of the pipe
    closed at once); the command ends quietly, as Unix tools do."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "harness", "--help"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


@pytest.mark.parametrize("module", ["harness.compare", "harness.history"])
def test_tool_help_prints_no_rst_markup(module: str) -> None:
    """The tools' --help is their module docstring, printed without ``code`` or :mod: markup."""
    done = run(sys.executable, "-m", module, "--help")
    assert done.returncode == 0, done.stderr
    assert f"python -m {module}" in done.stdout
    assert "``" not in done.stdout and ":mod:" not in done.stdout


def test_the_tuning_command_has_its_own_help_and_promote_says_it_is_no_command() -> None:
    done = run(sys.executable, "-m", "harness.tune", "--help")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("usage: python -m harness.tune ")
    assert not re.search(r"\*\*|``|:func:|parse_dimension", done.stdout)  # for users, no markup
    keys = done.stdout.split("== tune/ keys (tune.KEY=VALUE), with their defaults ==\n")[1]
    tune_yaml = yaml.safe_load((CONFIG_DIR / "tune" / "default.yaml").read_text())
    listed = [line.split(":")[0] for line in keys.splitlines() if re.match(r"^\w+:", line)]
    assert listed == [k for k in tune_yaml if k != "defaults"]
    promote = run(sys.executable, "-m", "harness.promote")
    assert promote.returncode == 2 and promote.stdout == ""
    assert promote.stderr.startswith("error: harness.promote is not a command: ")
    assert len(promote.stderr.strip().splitlines()) == 1
