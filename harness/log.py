"""``python -m harness.log runs/results/<name>/<run>``: log a saved results folder to MLflow later.

For a run whose tracking failed (server down, interrupted while logging) or ran with
``tracking=none``: everything MLflow gets is in the folder (``record.json``, ``config.yaml``, the
per-model files), so nothing is recomputed. Idempotent: runs logged from a folder carry its id
(tag ``harness.folder_id``); a second call finds them and adds only what is missing.

A run with ``gate.promote`` is promoted once it is logged (the folder's ``promotion.json``), unless
its parent run says that was done.

Exit codes: 0 logged (or already complete), 2 the folder is not a complete results folder,
3 MLflow logging or the registry promotion failed, 130/143 interrupted.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

import yaml

from harness.folders import COMPLETE, INCOMPLETE, RUN_INFO, is_complete
from harness.record import FOLDER_TAG, LOGGED_TAG, PLAN_FILE, replay

__all__ = ["load_folder", "main"]


class _Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise(signum: int, frame: Any) -> None:
    raise _Interrupted(signum)


def load_folder(folder: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The plan, config and run info of a complete results folder; ValueError (one line) when it
    is not one."""
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a results folder (no such directory)")
    if (folder / INCOMPLETE).exists():
        stage = (folder / INCOMPLETE).read_text().strip().replace("\n", "; ")
        raise ValueError(
            f"{folder} is INCOMPLETE ({stage}); finish it with the same command and "
            f"resume={folder} (which logs it)"
        )
    if not is_complete(folder):
        raise ValueError(f"{folder} has no {COMPLETE} mark: not a finished results folder")
    parts = {}
    for name in (PLAN_FILE, "config.yaml", RUN_INFO):
        path = folder / name
        try:
            text = path.read_text()
            parts[name] = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
        except (OSError, ValueError, yaml.YAMLError) as err:
            raise ValueError(f"{path} is missing or unreadable ({type(err).__name__})") from None
    return parts[PLAN_FILE], parts["config.yaml"] or {}, parts[RUN_INFO]


def _anchored(uri: str, cwd: str | None) -> str:
    """A relative sqlite store path resolved against the run's working directory."""
    if uri.startswith("sqlite:///") and cwd and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(cwd) / uri.removeprefix("sqlite:///"))
    return uri


def main(argv: list[str] | None = None) -> int:
    """Log one results folder; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m harness.log", description="Log a saved results folder to MLflow."
    )
    parser.add_argument("folder", type=Path, help="runs/results/<name>/<run>")
    parser.add_argument("--uri", help="tracking URI (default: the run's tracking.uri)")
    parser.add_argument("--experiment", help="experiment name (default: the run's name)")
    args = parser.parse_args(argv)
    try:
        the_plan, config, info = load_folder(args.folder)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    tracking = config.get("tracking") or {}
    uri = args.uri or tracking.get("uri")
    if not uri:
        print(
            f"error: {args.folder} was run without tracking: give the store, e.g. "
            f"--uri sqlite:///runs/mlflow.db",
            file=sys.stderr,
        )
        return 2
    uri = uri if args.uri else _anchored(str(uri), info.get("cwd"))
    experiment = args.experiment or str(config.get("name") or info.get("name"))
    artifacts = tracking.get("artifacts") if not args.uri else None
    if artifacts and info.get("cwd") and not Path(artifacts).is_absolute():
        artifacts = str(Path(info["cwd"]) / artifacts)
    from harness.tracking import Tracker, configure_http

    tracker = None
    handlers = {sig: signal.signal(sig, _raise) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        configure_http(tracking.get("retries", 2), tracking.get("timeout", 60))
        tracker = Tracker(str(uri), experiment, artifacts, quiet=True)  # one line, no traceback
        from_folder = tracker.find({FOLDER_TAG: the_plan["folder_id"]})
        ids_here = {r.info.run_id for r in from_folder}  # a sweep job's parent has a parent too
        before = [r for r in from_folder if r.data.tags.get("mlflow.parentRunId") not in ids_here]
        ids = replay(tracker, the_plan, args.folder)
    except _Interrupted as stop:
        left = tracker.abort("KILLED") if tracker is not None else []
        name = signal.Signals(stop.signum).name
        extra = f"; {len(left)} MLflow run(s) could not be ended" if left else ""
        print(f"error: interrupted by {name}; run again to complete{extra}", file=sys.stderr)
        return 128 + stop.signum
    except Exception as err:
        if tracker is not None:
            tracker.abort("FAILED")
        first = (str(err).strip().splitlines() or [""])[0]
        print(
            f"error: MLflow logging to {uri} failed ({type(err).__name__}: {first})",
            file=sys.stderr,
        )
        return 3
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if before and before[0].data.tags.get(LOGGED_TAG) == "complete":
        what = "already logged, nothing to do"
    elif before:
        what = "completed the partly logged run"
    else:
        what = "logged"
    print(f"{args.folder}: {what}: {uri} experiment {experiment!r}, parent run {ids['parent']}")
    return _promote(args.folder, str(uri), ids["parent"], tracker)


def _promote(folder: Path, uri: str, parent: str, tracker: Any) -> int:
    """Apply the run's ``gate.promote`` (saved in the folder) unless the parent run says it was
    applied: a run whose logging failed is promoted once it is logged, and only once."""
    from harness.folders import run_info
    from harness.promote import (
        DONE_TAG,
        EXIT_REGISTRY_FAILED,
        PROMOTION_FILE,
        apply_promotion,
        stamp_date,
    )

    path = folder / PROMOTION_FILE
    if not path.is_file():
        return 0
    try:
        done = tracker.client.get_run(parent).data.tags.get(DONE_TAG)
    except Exception as err:
        print(f"error: registry promotion at {uri} failed ({type(err).__name__})", file=sys.stderr)
        return EXIT_REGISTRY_FAILED
    if done is not None:
        print(f"promotion: already applied ({done})")
        return 0
    started = stamp_date(str(run_info(folder).get("stamp", "")))  # for a spec without a date
    return apply_promotion(json.loads(path.read_text()), uri, parent, started)


if __name__ == "__main__":
    from harness.shutdown import run_and_leave

    run_and_leave(main)
