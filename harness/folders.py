"""Results folders: one per run, allocated atomically, marked INCOMPLETE until the run is done.

Every run (each multirun job, each of several concurrent runs) gets its own folder
``<runs_dir>/results/<name>/<YYYYmmdd-HHMMSS>-<split key[:8]>-<6 random hex>``, created with
``mkdir(exist_ok=False)`` so two runs can never share one. ``name`` (the MLflow experiment name)
becomes a single safe path component, so results never leave ``<runs_dir>/results``.

While a run works, its folder holds a file ``INCOMPLETE`` naming the current stage; when the local
results are whole (summary, per-model files, report, ``record.json``) it is replaced by
``COMPLETE``. An interrupted or failed run leaves ``INCOMPLETE`` behind with the stage it reached.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

__all__ = [
    "COMPLETE",
    "INCOMPLETE",
    "RUN_INFO",
    "RunsDirCheck",
    "allocate",
    "checkpoint",
    "is_complete",
    "mark_complete",
    "mark_incomplete",
    "safe_component",
    "usable_runs_dir",
]

COMPLETE, INCOMPLETE, RUN_INFO = "COMPLETE", "INCOMPLETE", "run.json"
_MAX_COMPONENT = 120


def safe_component(name: str) -> str:
    """``name`` as one path component that cannot leave its parent folder.

    Characters other than letters, digits, ``_``, ``-`` and ``.`` become ``_``; leading and
    trailing dots and underscores are dropped (no ``..``, no hidden folder); empty → ``run``.

    >>> safe_component("offline-eval"), safe_component("../../x"), safe_component("/tmp/a b")
    ('offline-eval', 'x', 'tmp_a_b')
    >>> safe_component(".."), safe_component("team/exp.v2")
    ('run', 'team_exp.v2')
    """
    text = re.sub(r"[^\w.-]+", "_", str(name)).strip("._")[:_MAX_COMPONENT].strip("._")
    return text or "run"


def allocate(runs_dir: Path, name: str, key: str, stamp: str) -> Path:
    """Create and return a new, empty results folder of its own for one run.

    The folder is created with ``exist_ok=False``: a clash (same second, same split, same random
    suffix) retries with another suffix instead of sharing. Writes ``run.json`` (a unique id that
    ``harness.log`` uses to find this run in MLflow) and the ``INCOMPLETE`` mark.
    """
    results = Path(runs_dir) / "results"
    parent = results / safe_component(name)
    parent.mkdir(parents=True, exist_ok=True)
    if not parent.resolve().is_relative_to(results.resolve()):  # e.g. a symlinked name folder
        raise ValueError(f"results folder {parent} resolves outside {results}")
    for _ in range(100):
        folder = parent / f"{stamp}-{key[:8]}-{secrets.token_hex(3)}"
        try:
            folder.mkdir(exist_ok=False)
        except FileExistsError:
            continue
        info = {
            "id": uuid.uuid4().hex,
            "name": str(name),
            "stamp": stamp,
            "split_key": key,
            "cwd": os.getcwd(),  # relative paths of the config (runs_dir, sqlite store) start here
        }
        (folder / RUN_INFO).write_text(json.dumps(info, indent=1))
        mark_incomplete(folder, "starting")
        return folder
    raise FileExistsError(f"could not create a new results folder under {parent}")


def run_info(folder: Path) -> dict[str, Any]:
    """The ``run.json`` of a results folder (its id, name, time stamp and split key)."""
    return dict(json.loads((Path(folder) / RUN_INFO).read_text()))


def mark_incomplete(folder: Path, stage: str, reason: str | None = None) -> None:
    """Write ``INCOMPLETE`` naming the stage the run is in (and why it stopped, when it did)."""
    text = f"stage: {stage}\n" + (f"reason: {reason}\n" if reason else "")
    _write_atomic(Path(folder) / INCOMPLETE, text)


def mark_complete(folder: Path) -> None:
    """Replace ``INCOMPLETE`` by ``COMPLETE``: every local result of the run is written."""
    folder = Path(folder)
    _write_atomic(folder / COMPLETE, f"completed: {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    (folder / INCOMPLETE).unlink(missing_ok=True)


def is_complete(folder: Path) -> bool:
    """True when the folder was marked ``COMPLETE`` and not ``INCOMPLETE``."""
    folder = Path(folder)
    return (folder / COMPLETE).is_file() and not (folder / INCOMPLETE).exists()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


#: The stage the current process is in (for the interruption message).
current = {"stage": "starting"}


def checkpoint(stage: str, folder: Path | None = None) -> None:
    """Enter ``stage``: remember it, update ``INCOMPLETE`` and, for tests only, pause there.

    With ``HARNESS_TEST_PAUSE_AT=<stage>`` in the environment the process prints
    ``harness: paused at <stage>`` to stderr and waits (until the file named by
    ``HARNESS_TEST_RESUME_FILE`` exists, or up to 300 s), so a test can interrupt it exactly there.
    """
    current["stage"] = stage
    if folder is not None and not is_complete(folder):
        mark_incomplete(folder, stage)
    if os.environ.get("HARNESS_TEST_PAUSE_AT") != stage:
        return
    print(f"harness: paused at {stage}", file=sys.stderr, flush=True)
    resume = os.environ.get("HARNESS_TEST_RESUME_FILE")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (resume and Path(resume).exists()):
        time.sleep(0.05)


def usable_runs_dir(runs_dir: str | os.PathLike[str]) -> str | None:
    """Why ``runs_dir`` cannot hold results (one line naming the path), or None when it can.

    Creates it when missing, then writes and removes a probe file in it and, when it exists
    already, in its ``results`` folder (which must be a folder).
    """
    root = Path(runs_dir)
    for path in (root, root / "results"):
        if path != root and not os.path.lexists(path):
            continue
        try:
            if path == root:
                path.mkdir(parents=True, exist_ok=True)
            elif not path.is_dir():
                raise NotADirectoryError(20, "Not a directory", str(path))
            handle, probe = tempfile.mkstemp(dir=path, prefix=".probe-")
            os.close(handle)
            os.unlink(probe)
        except OSError as err:
            where = err.filename if err.filename is not None else path
            return f"runs_dir is not usable: cannot write {where}: {err.strerror or err}"
    return None


class RunsDirCheck(Callback):
    """Hydra callback: refuse an unusable ``runs_dir`` with one line and exit 2, before Hydra
    creates its output folder there (which would otherwise end in a traceback)."""

    def _check(self, config: Any) -> None:
        problem = usable_runs_dir(str(config.runs_dir))
        if problem is not None:
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        """Check before a single run."""
        self._check(config)

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        """Check before a sweep."""
        self._check(config)
