"""The stage named by ``INCOMPLETE`` and by the interruption line is the stage the run is in
(audit finding D4: during the comparison they said ``models``, in the first seconds of logging
``report``).

Real components: the run in process with a local sqlite MLflow store, and the CLI in a
subprocess interrupted by a real SIGINT.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from support import HarnessCli

from harness import cli, folders, progress
from harness.folders import INCOMPLETE

pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")

#: every timed stage of a numpy run with MLflow logging, in the order the run enters them
STAGES = ["load", "split", "candidates", "comparison", "report", "logging"]


def _cfg(runs: Path) -> Any:
    overrides = [
        "experiment=quick",
        "progress=false",
        "tracking=local",
        f"runs_dir={runs}",
        "model=[popularity,item_knn]",
    ]
    with initialize_config_module(config_module="harness.configs", version_base=None):
        return compose(config_name="config", overrides=overrides)


def test_each_stage_is_named_from_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the moment each timed stage starts (its status line), the remembered stage and the
    folder's ``INCOMPLETE`` already name it: a signal then is reported as during that stage."""
    seen: list[tuple[str, str, str | None]] = []
    real = progress.Stages.stage

    def watched(self: progress.Stages, name: str, doing: str | None = None) -> Iterator[None]:
        folder = cli._active.get("folder")
        marker = Path(folder) / INCOMPLETE if folder is not None else None
        text = marker.read_text() if marker is not None and marker.exists() else None
        seen.append((name, folders.current["stage"], text))
        return real(self, name, doing)

    monkeypatch.setattr(progress.Stages, "stage", watched)
    # the run's process-wide state, restored for the next test (the CLI's main() resets it)
    monkeypatch.setitem(folders.current, "stage", "starting")
    monkeypatch.setattr(cli, "_active", {})
    monkeypatch.setattr(cli, "sweep_jobs", [])
    monkeypatch.chdir(tmp_path)
    assert cli.run(_cfg(tmp_path / "runs")) == 0
    assert [name for name, _, _ in seen] == STAGES
    for name, current, _ in seen:
        assert current == name, seen
    # the folder exists from the candidates on; once the report is written it is COMPLETE
    incomplete = {name: text for name, _, text in seen}
    assert incomplete["load"] is None and incomplete["split"] is None
    for name in ("candidates", "comparison", "report"):
        assert incomplete[name] == f"stage: {name}\n", seen
    assert incomplete["logging"] is None


def test_sigint_during_the_comparison_names_the_comparison(tmp_path: Path) -> None:
    """A real SIGINT while the run is paused at the comparison's start: exit 130, the error
    line and ``INCOMPLETE`` say ``comparison`` (they said ``models`` before the fix)."""
    proc = HarnessCli().start(
        tmp_path,
        "experiment=quick",
        "progress=false",
        "tracking=none",
        "model=[popularity,item_knn]",
        env={"HARNESS_TEST_PAUSE_AT": "comparison"},
    )
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.strip() == "harness: paused at comparison":
            break
    else:
        proc.wait()
        pytest.fail(f"never paused at the comparison (exit {proc.returncode}):\n{''.join(lines)}")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith("error: interrupted by SIGINT during comparison;"), errors[0]
    (folder,) = (tmp_path / "runs" / "results" / "offline-eval").iterdir()
    assert (folder / INCOMPLETE).read_text() == "stage: comparison\nreason: interrupted by SIGINT\n"
