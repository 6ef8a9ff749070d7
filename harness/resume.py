"""Resuming a run: its results folder, and the models it finished, are reused.

``resume=FOLDER`` picks up an INCOMPLETE results folder, or a finished one in which a model
failed; ``resume=last`` the newest such folder of the experiment that this run can resume. The
data and split must be the same (the split key of ``run.json``) and so must every setting that
shapes the numbers; only ``model`` may differ: a model whose config is unchanged and that
finished is reused, the others (new, changed, failed or cut off) run again. Progress bars,
``debug``, ``tracking`` and how ``runs_dir`` is spelled may differ too.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.experiment import ModelOutcome, load_model
from harness.folders import (
    COMPLETE,
    INCOMPLETE,
    RUN_INFO,
    is_complete,
    mark_incomplete,
    run_info,
    safe_component,
)

__all__ = [
    "Resumed",
    "check_folder",
    "drop_moved_aliases",
    "failed",
    "finished",
    "record_input_files",
    "record_resumption",
    "resume",
]

#: Keys that do not change a run's numbers, so a resumed run may set them differently.
_FREE = ("resume", "progress", "debug", "tracking", "runs_dir")
#: The files a run's config names (side inputs, candidates, score files), as they were.
INPUT_FILES = "input_files.json"
#: Files up to this size are compared by content; larger ones by size and modification time.
_HASHED_BYTES = 256 << 20
#: The events file: the split key already holds its content (not read twice at each start).
_EVENTS = "dataset.path"


def _file_state(path: str) -> dict[str, Any]:
    stat = os.stat(path)
    state: dict[str, Any] = {"path": path, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    if stat.st_size <= _HASHED_BYTES:
        with open(path, "rb") as handle:
            state["sha256"] = hashlib.file_digest(handle, "sha256").hexdigest()
    return state


def _input_files(config: Mapping[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Every config value naming an existing file (outside :data:`_FREE`, and not the events
    file: :data:`_EVENTS`): key → its state."""
    found: dict[str, dict[str, Any]] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if (not prefix and key in _FREE) or name == _EVENTS:
            continue
        if isinstance(value, Mapping):
            found |= _input_files(value, f"{name}.")
        elif isinstance(value, str) and value and os.path.isfile(value):
            found[name] = _file_state(value)
    return found


def record_input_files(folder: Path, config: Mapping[str, Any]) -> None:
    """Write what the files ``config`` names are now, for a later resume to compare with: a
    file rewritten at the same path changes the numbers as much as a changed setting."""
    (folder / INPUT_FILES).write_text(json.dumps(_input_files(config), indent=1))


def _same_file(old: Mapping[str, Any], new: Mapping[str, Any] | None) -> bool:
    if new is None:
        return False
    if "sha256" in old and "sha256" in new:
        return bool(old["sha256"] == new["sha256"])
    return all(old.get(k) == new.get(k) for k in ("size", "mtime_ns"))


def _changed_files(folder: Path, config: Mapping[str, Any]) -> dict[str, str]:
    """The config keys (with their paths) whose file differs from the one ``folder``'s run read
    (none recorded: a folder from before the files were recorded)."""
    try:
        old = json.loads((folder / INPUT_FILES).read_text())
    except (OSError, ValueError):
        return {}
    new = _input_files(config)
    return {k: str(state["path"]) for k, state in old.items() if not _same_file(state, new.get(k))}


@dataclass(frozen=True)
class Resumed:
    """The folder taken over and the finished models found in it."""

    folder: Path
    reused: dict[str, ModelOutcome]


def _statuses(folder: Path) -> dict[str, object]:
    """Each model of ``folder`` with a readable ``result.json``: its ``ok`` (None if absent)."""
    found = {}
    for path in sorted(Path(folder).glob("*/result.json")):
        try:
            found[path.parent.name] = json.loads(path.read_text()).get("ok")
        except (OSError, ValueError):
            continue
    return found


def finished(folder: Path) -> list[str]:
    """The models of ``folder`` whose results are whole (their ``result.json`` says ok)."""
    return [name for name, ok in _statuses(folder).items() if ok is True]


def failed(folder: Path) -> list[str]:
    """The models of ``folder`` that failed (their ``result.json`` says not ok)."""
    return [name for name, ok in _statuses(folder).items() if ok is False]


def _resumable(folder: Path) -> bool:
    """An interrupted run (``INCOMPLETE``), or a finished one in which a model failed."""
    if not (folder / RUN_INFO).is_file():
        return False
    return not is_complete(folder) or bool(failed(folder))


def check_folder(spec: str | None) -> None:
    """Refuse at once (before the data is read) a ``resume`` folder that cannot be resumed."""
    if not spec or spec == "last":
        return
    folder = Path(spec)
    if not (folder / RUN_INFO).is_file():
        raise ValueError(f"resume: {folder} is not a results folder (no {RUN_INFO})")
    if is_complete(folder) and not failed(folder):
        raise ValueError(
            f"resume: {folder} is COMPLETE with every model ok, nothing to resume (to log it: "
            f"python -m harness.log {folder})"
        )
    if not is_complete(folder) and not (folder / INCOMPLETE).is_file():
        raise ValueError(f"resume: {folder} is not marked {INCOMPLETE} (not an interrupted run)")


def _difference(old: Any, new: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first key (dotted) whose value differs between two plain configs, with both values
    (a level's own values before its groups: ``seed``, not the ``candidates.seed`` it sets)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        nested = {k for k in set(old) | set(new) if isinstance(old.get(k, new.get(k)), Mapping)}
        for key in sorted(set(old) | set(new), key=lambda k: (k in nested, str(k))):
            if path == "" and key in _FREE:
                continue
            missing = "(not set)"
            found = _difference(old.get(key, missing), new.get(key, missing), f"{path}{key}.")
            if found:
                return found
        return None
    return None if old == new else (path.rstrip("."), old, new)


def _saved_config(folder: Path) -> dict[str, Any]:
    try:
        return dict(yaml.safe_load((folder / "config.yaml").read_text()) or {})
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"resume: cannot read {folder / 'config.yaml'} ({err})") from err


def _mismatch(folder: Path, key: str, config: Mapping[str, Any]) -> str | None:
    """Why ``folder`` cannot be resumed by a run of ``config`` on split ``key`` (None: it can)."""
    if run_info(folder).get("split_key") != key:
        return (
            f"{folder} was split from other data or split settings (split key "
            f"{str(run_info(folder).get('split_key'))[:8]}, this run {key[:8]})"
        )
    saved = _saved_config(folder)
    diff = _difference({**saved, "model": None}, {**config, "model": None})
    if diff:
        where, was, now = diff
        return f"{folder} was run with {where}={was!r}, this run has {where}={now!r}"
    changed = _changed_files(folder, config)
    side = [k for k in changed if not k.startswith("model.")]
    if side:  # a model's own file may change: that model runs again
        return f"{folder} read {side[0]}={changed[side[0]]!r} before that file changed"
    return None


def _last(runs_dir: Path, name: str, key: str, config: Mapping[str, Any]) -> Path:
    """The newest folder of experiment ``name`` that was interrupted or in which a model failed,
    run with this ``config`` but for ``model`` (which may differ, as with ``resume=FOLDER``)."""
    parent = runs_dir / "results" / safe_component(name)
    folders = sorted(parent.iterdir(), reverse=True) if parent.is_dir() else []
    tried = [folder for folder in folders if _resumable(folder)]
    newest: str | None = None  # why the newest such folder does not fit, for the error
    for folder in tried:  # folder names start with the start time: newest first
        try:
            why = _mismatch(folder, key, config)
        except ValueError:  # stopped before its config was written: not this run
            continue
        if why is None:
            return folder
        newest = newest or why
    reason = f"; the newest, {newest}" if newest else ""
    raise ValueError(
        f"resume=last: no interrupted run (or run with a failed model) of experiment {name!r} "
        f"with this config under {parent} ({len(tried)} such folder(s) checked{reason}); name "
        "the folder (resume=FOLDER) or drop resume"
    )


def resume(spec: str, runs_dir: Path, name: str, key: str, config: Mapping[str, Any]) -> Resumed:
    """Take over the folder ``spec`` names (a path, or ``last``) for a run of ``config`` (plain,
    resolved) on split ``key``: check it matches, load its finished models whose config is
    unchanged and clear the others' files."""
    if spec == "last":
        folder = _last(runs_dir, name, key, config)
    else:
        check_folder(spec)
        folder = Path(spec)
        why = _mismatch(folder, key, config)
        if why:
            raise ValueError(f"resume: {why}")
    if is_complete(folder):  # a model failed in it: the folder is being worked on again
        mark_incomplete(folder, "resuming")
        (folder / COMPLETE).unlink()
    stamp = str(run_info(folder).get("stamp", ""))
    started = f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}"
    old_models = _saved_config(folder).get("model") or {}
    new_models = config.get("model") or {}
    dropped = [str(m) for m in old_models if m not in new_models]
    for model in dropped:  # a failed or unfinished model left out: its record goes with it
        if (folder / model).is_dir() and load_model(folder, model) is None:
            shutil.rmtree(folder / model)
    if dropped and (folder / "record.json").exists():
        _new_id(folder)  # its MLflow runs hold the models left out: log a new one
    reused: dict[str, ModelOutcome] = {}
    rewritten = {k.split(".")[1] for k in _changed_files(folder, config) if k.startswith("model.")}
    for model in new_models:
        same = model in old_models and _difference(old_models[model], new_models[model]) is None
        same = same and str(model) not in rewritten  # its score file changed: run it again
        outcome = load_model(folder, str(model)) if same else None
        if outcome is not None:
            outcome.reused_from = started
            outcome.notes.append(f"results reused from the run started {started}")
            reused[str(model)] = outcome
        elif (folder / str(model)).is_dir():  # unfinished, failed or changed: run again
            shutil.rmtree(folder / str(model))
    return Resumed(folder, reused)


def drop_moved_aliases(
    folder: Path, reused: dict[str, ModelOutcome], models: Mapping[str, Any]
) -> list[str]:
    """Registry models named by an alias (``models:/reco@champion``) whose alias points to
    another version than the reused results were computed with: dropped from ``reused`` (their
    files too), so they run again; one note each. A registry that cannot be read says nothing
    either way: the model runs again (its load reports the registry's error)."""
    from mlflow import MlflowClient

    from harness.models.mlflow_model import MLflowModel

    notes = []
    for name in list(reused):
        model = models.get(name)
        if not isinstance(model, MLflowModel) or "@" not in model.uri:
            continue
        was = (reused[name].info or {}).get("info.version")
        registry = model.registry_uri or model.tracking_uri
        try:
            client = MlflowClient(tracking_uri=model.tracking_uri, registry_uri=registry)
            now = str(model.model_version(client).version)
        except Exception:
            now = "unknown (the registry cannot be read)"
        if now != str(was):
            del reused[name]
            shutil.rmtree(folder / name, ignore_errors=True)
            notes.append(
                f"resume: {model.uri} is version {now} now, not {was} as in the reused results: "
                f"{name} runs again"
            )
    return notes


def _new_id(folder: Path) -> None:
    """A new id in ``run.json``: the resumed run is logged as a new MLflow run, since the one
    the interrupted run logged holds other results."""
    info = run_info(folder)
    info["id"] = uuid.uuid4().hex
    (folder / RUN_INFO).write_text(json.dumps(info, indent=1))


def record_resumption(folder: Path, outcomes: Mapping[str, ModelOutcome]) -> None:
    """Note in ``run.json`` which models a resumed run reused and which it ran (once they ran:
    a Spark model whose saved tables could not be read ran again); a new folder id when models
    ran again after the interrupted run had written ``record.json`` (MLflow may hold its runs)."""
    reused = sorted(name for name, outcome in outcomes.items() if outcome.reused_from)
    rerun = [name for name, outcome in outcomes.items() if not outcome.reused_from]
    if rerun and (folder / "record.json").exists():
        _new_id(folder)
    info = run_info(folder)
    info.setdefault("resumed", []).append(
        {"at": time.strftime("%Y%m%d-%H%M%S"), "reused": reused, "rerun": rerun}
    )
    (folder / RUN_INFO).write_text(json.dumps(info, indent=1))
