"""Commands that only read MLflow refuse a sqlite store that does not exist, in one line, and
leave no empty store behind (MLflow would create one, with its INFO lines, and find nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import history
from harness.compare import __main__ as compare_cli


@pytest.mark.parametrize("command", ["history", "compare"])
def test_a_missing_store_is_one_line_and_exit_2(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "nowhere" / "mlflow.db"
    uri = f"sqlite:///{db}"
    if command == "history":
        code = history.main(["some-model", "--tracking-uri", uri])
    else:
        code = compare_cli.main(["run-a", "run-b", "--tracking-uri", uri])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        f"error: no MLflow store at {db} ({uri}); give the store the runs were logged to "
        "(--tracking-uri; a run logs to runs/mlflow.db under the folder it ran in)"
    ]
    assert not db.exists() and not db.parent.exists()
