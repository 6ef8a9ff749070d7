"""Check in a real headless browser that MLflow shows a harness run at a glance.

Runs the default job (``experiment=quick``) into a temporary store, starts ``mlflow server`` on
127.0.0.1, opens the experiment in Debian's Chromium (driven by the ``playwright`` package, no
browser download) and checks that it opens on the runs (not the GenAI overview), that the run
names, the decision and the headline metric are visible. Saves ``docs/mlflow-runs.png`` and
``docs/report-example.png`` (the run's report.html). Exit 0 when every check passes, 1 when one
fails (each failure one line), 2 when Chromium or playwright is missing.

    apt-get install -y chromium && pip install playwright   # no `playwright install` needed
    python scripts/check_mlflow_ui.py [--keep DIR] [--docs docs]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
MLFLOW_SERVER = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--workers", "1"]
ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Poll ``/health`` until the server answers (ValueError if it exits or never answers)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise ValueError(f"mlflow server exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise ValueError(f"mlflow server at {url} did not answer within {timeout:.0f} s")


def run_job(work: Path) -> tuple[str, Path, str]:
    """The default job into ``work/runs``: (store URI, results folder, stdout); a job already
    run there (``--keep`` again) is reused."""
    saved = work / "harness-output.txt"
    if saved.exists():
        out = saved.read_text()
        folder = re.search(r"^results: (.+)$", out, re.M).group(1).strip()  # type: ignore[union-attr]
        return f"sqlite:///{work}/runs/mlflow.db", work / folder, out
    done = subprocess.run(
        [sys.executable, "-m", "harness", "experiment=quick", "progress=false"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode not in (0, 10, 11):
        raise ValueError(
            f"the harness run failed ({done.returncode}): {done.stderr.strip()[-300:]}"
        )
    folder = re.search(r"^results: (.+)$", done.stdout, re.M)
    if folder is None:
        raise ValueError("the harness run printed no results folder")
    saved.write_text(done.stdout)
    return f"sqlite:///{work}/runs/mlflow.db", work / folder.group(1).strip(), done.stdout


def check(page_text: str, stdout: str) -> list[str]:
    """What the runs page must show, as failure lines (empty: all good)."""
    failures = []
    names = ["synthetic · global_time · 3 models"] + [
        f"{m} · global_time · synthetic" for m in ("random", "popularity", "item_knn")
    ]
    failures += [f"run name {n!r} not visible" for n in names if n not in page_text]
    decision = re.search(r"overall gate decision: (\w+)", stdout)
    if decision and decision.group(1) not in page_text:
        failures.append(f"decision {decision.group(1)} not visible")
    if "ndcg_at_10" not in page_text:
        failures.append("headline metric ndcg_at_10 not visible")
    return failures


def look(
    browser: Any, url: str, experiment_id: str, uri: str, stdout: str, docs: Path
) -> tuple[list[str], list[str]]:
    """Open the experiment as a user would; return (failures, notes)."""
    import json

    from mlflow import MlflowClient

    failures, notes = [], []
    fresh = browser.new_page(viewport={"width": 1600, "height": 900})
    fresh.goto(f"{url}/#/experiments/{experiment_id}", wait_until="load")
    fresh.wait_for_timeout(6000)
    if "/runs" not in fresh.url:
        notes.append(
            f"without ?workflowType a fresh browser opens {fresh.url.split('#', 1)[1]} (MLflow "
            "remembers the GenAI switch per browser): use the link the harness prints"
        )
    fresh.close()
    # a fresh browser (nothing saved) on the link the harness prints; only MLflow's assistant
    # panel is kept closed, so the screenshot shows the table
    page = browser.new_page(viewport={"width": 1600, "height": 700})
    for item, value in (("panelOpen_v1", "false"), ("fab.autoOpenedOnFirstLoad_v1", "true")):
        page.add_init_script(f"window.localStorage.setItem('mlflow.assistant.{item}', '{value}')")
    printed = re.search(r"^  runs: (\S+)$", stdout, re.M)
    if printed is None:
        return [*failures, "the harness printed no runs link"], notes
    link = printed.group(1).replace("http://127.0.0.1:5000", url)
    page.goto(link, wait_until="load")
    page.wait_for_timeout(8000)
    if "/runs" not in page.url:
        failures.append(f"the experiment opened on {page.url.split('#', 1)[1]}, not on its runs")
    text = page.inner_text("body")
    if "Token Usage" in text or "Model training" not in text:
        failures.append("the page shows the GenAI view, not model training")
    failures += check(text, stdout)
    page.screenshot(path=str(docs / "mlflow-runs.png"))
    exp = MlflowClient(uri).get_experiment(experiment_id)
    if exp.tags.get("mlflow.experimentKind") != "custom_model_development":
        failures.append("the experiment has no mlflow.experimentKind=custom_model_development")
    view = json.loads(exp.tags.get("mlflow.sharedViewState.harness", "{}"))
    if "tags.`decision`" not in view.get("selectedColumns", []):
        failures.append("the experiment has no shared runs view with the decision column")
    return failures, notes


def main(argv: list[str] | None = None) -> int:
    """Run the job, serve it, look at it in Chromium; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="where screenshots go")
    parser.add_argument("--keep", type=Path, help="work folder to keep (default: a temp folder)")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"error: {CHROMIUM} not found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("error: the playwright package is missing (pip install playwright)", file=sys.stderr)
        return 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="mlflow-ui-"))
    work.mkdir(parents=True, exist_ok=True)
    server = None
    try:
        uri, folder, stdout = run_job(work)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [*MLFLOW_SERVER, "--backend-store-uri", uri, "--port", str(port)],
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
            start_new_session=True,
        )
        _wait_ready(url, server)
        from mlflow import MlflowClient

        exp = MlflowClient(uri).get_experiment_by_name("offline-eval")
        args.docs.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            failures, notes = look(browser, url, exp.experiment_id, uri, stdout, args.docs)
            report = browser.new_page(viewport={"width": 1280, "height": 1400})
            report.goto((folder / "report.html").resolve().as_uri(), wait_until="load")
            report.screenshot(path=str(args.docs / "report-example.png"))
            browser.close()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    for note in notes:
        print(f"note: {note}")
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    if not failures:
        print(f"ok: runs view, names, decision and headline visible; screenshots in {args.docs}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
