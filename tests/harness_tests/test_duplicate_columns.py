"""A table whose header gives one column name twice is refused (audit finding D6): pandas
renamed the second ``user`` to ``user.1`` and the run used the first without a word.

The expected messages are written here from the file and the repeated name, not taken from
the loader's output; the CLI runs once in a subprocess for the exit code.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import HarnessCli

from harness.candidates import CandidateSpec, build_candidates
from harness.data import load_interactions, read_text_table
from harness.errors import DataError
from harness.split import load_or_make_split

#: 4 users x 3 items, the second ``user`` column holding other ids (as in the audit's file)
ROWS = [(f"u{u}", f"i{i}", 10 * u + i, f"x{u}") for u in range(4) for i in range(3)]


def _write(path: Path, sep: str, header: list[str], rows: list[tuple[object, ...]]) -> Path:
    lines = [sep.join(header)] + [sep.join(str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def _refused(err: pytest.ExceptionInfo[DataError], path: Path, name: str) -> None:
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: column '{name}' appears 2 times"), message


def test_cli_exits_2_with_one_line_naming_file_and_column(tmp_path: Path) -> None:
    _write(tmp_path / "dup.csv", ",", ["user", "item", "timestamp", "user"], ROWS)
    done = HarnessCli().run(
        tmp_path,
        "experiment=quick",
        "dataset=file",
        "dataset.path=dup.csv",
        "model=[popularity]",
        "tracking=none",
        "progress=false",
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    expected = "error: dup.csv: column 'user' appears 2 times in the header; "
    assert lines == [expected + "each column needs its own name"], done.stderr


def test_tsv_repeating_a_column_is_refused(tmp_path: Path) -> None:
    rows = [(u, i, t, f"{i}b") for u, i, t, _ in ROWS]
    path = _write(tmp_path / "dup.tsv", "\t", ["user", "item", "timestamp", "item"], rows)
    with pytest.raises(DataError) as err:
        load_interactions(path)
    _refused(err, path, "item")


def test_a_repeated_unused_column_is_refused_too(tmp_path: Path) -> None:
    """Even a column the loader does not use: the file cannot be read one way only."""
    rows = [(u, i, t, "a", "b") for u, i, t, _ in ROWS]
    path = _write(tmp_path / "dup.csv", ",", ["user", "item", "timestamp", "x", "x"], rows)
    with pytest.raises(DataError) as err:
        load_interactions(path)
    _refused(err, path, "x")


def test_blank_header_cells_stay_allowed(tmp_path: Path) -> None:
    """Two empty names (a trailing comma) are not a repeated name: pandas names them apart."""
    rows = [(u, i, t, "", "") for u, i, t, _ in ROWS]
    path = _write(tmp_path / "blank.csv", ",", ["user", "item", "timestamp", "", ""], rows)
    frame = load_interactions(path)
    assert len(frame) == len(ROWS) and frame["user"].nunique() == 4


def test_candidates_file_repeating_a_column_is_refused(tmp_path: Path) -> None:
    events = load_interactions(
        _write(tmp_path / "ok.csv", ",", ["user", "item", "timestamp"], [r[:3] for r in ROWS])
    )
    split = load_or_make_split(events, "global_time", {"cut": 0.75}, tmp_path / "splits")
    cands = _write(tmp_path / "cands.csv", ",", ["user", "item", "user"], [("u3", "i0", "u0")])
    with pytest.raises(DataError) as err:
        build_candidates(CandidateSpec(kind="file", path=str(cands)), split, None)
    _refused(err, cands, "user")
    with pytest.raises(DataError) as err:  # the reader other tables share (human labels)
        read_text_table(cands)
    _refused(err, cands, "user")


def test_parquet_with_a_repeated_column_is_refused(tmp_path: Path) -> None:
    """pyarrow writes such a file; reading a repeated name fails inside pyarrow with a
    multi-line message ("Multiple matches for FieldRef"), so it is refused up front."""
    path = tmp_path / "dup.parquet"
    columns = list(zip(*ROWS, strict=True))
    arrays = [pa.array(list(c)) for c in columns]
    pq.write_table(pa.Table.from_arrays(arrays, names=["user", "item", "timestamp", "user"]), path)
    assert pq.ParquetFile(path).schema_arrow.names == ["user", "item", "timestamp", "user"]
    with pytest.raises(DataError) as err:
        load_interactions(path)
    _refused(err, path, "user")
    assert "in the Parquet schema" in str(err.value)


def test_score_file_repeating_a_column_is_refused(tmp_path: Path) -> None:
    """A score file (model=precomputed) reads its header with the loader's rules."""
    from harness.models import PrecomputedScores

    events = load_interactions(
        _write(tmp_path / "ok.csv", ",", ["user", "item", "timestamp"], [r[:3] for r in ROWS])
    )
    scores = _write(
        tmp_path / "s.csv", ",", ["user", "item", "score", "user"], [("u0", "i1", 1, "x")]
    )
    with pytest.raises(DataError) as err:
        PrecomputedScores(path=str(scores)).fit(events)
    _refused(err, scores, "user")
