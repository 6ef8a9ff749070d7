"""Installed use: `pip install .` (not editable), then `python -m harness` from another folder.

The copy is installed with the interpreter running the tests into a target folder put first on
``PYTHONPATH``, so its dependencies come from wherever the user installed them (base Python or a
virtual environment) and the checkout itself is never imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_non_editable_install_runs_from_any_folder_with_user_configs(tmp_path: Path) -> None:
    python = sys.executable
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(tmp_path / "site"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    site = tmp_path / "site"
    assert (site / "harness" / "configs" / "config.yaml").is_file()
    assert (site / "harness" / "configs" / "model" / "item_knn.yaml").is_file()
    # a user's own config folder adds a model option without copying ours
    mine = tmp_path / "my_configs" / "model"
    mine.mkdir(parents=True)
    (mine / "pop_again.yaml").write_text("pop_again:\n  _target_: harness.models.PopularityModel\n")
    work = tmp_path / "work"
    work.mkdir()
    env = {"PYTHONPATH": str(site), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    proc = subprocess.run(
        [
            python,
            "-m",
            "harness",
            "--config-dir",
            str(tmp_path / "my_configs"),
            "experiment=quick",
            "progress=false",
            "tracking=none",
            "model=[popularity,pop_again]",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    imported = subprocess.run(
        [python, "-c", "import harness; print(harness.__file__)"],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    assert imported.startswith(str(site)), imported  # the installed copy, not the checkout
    assert (work / "runs" / "results").is_dir()
    summary = next((work / "runs" / "results").rglob("summary.csv")).read_text().splitlines()
    rows = {line.split(",")[0]: line.split(",")[1:] for line in summary[1:]}
    assert set(rows) == {"popularity", "pop_again"}
    assert rows["popularity"] == rows["pop_again"]  # same model, same numbers
