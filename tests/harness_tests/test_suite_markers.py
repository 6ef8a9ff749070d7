"""Every test that needs Java carries the ``spark`` mark, so ``-m "not spark"`` (the README's way
to run without Java, and what CI's fresh-venv stage runs) leaves them all out. A test needs Java
when it sits in ``spark_tests`` or uses the ``spark`` fixture; six such files carried no mark
before the collection hook in ``tests/conftest.py`` added it.

Reference: the suite's own collection in a separate pytest process, read by a small plugin that
records each test's folder, fixtures and marks (not by the hook under test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

PLUGIN = """
import json, os

def pytest_collection_finish(session):
    rows = [
        {
            "id": item.nodeid,
            "folder": item.path.parent.name,
            "fixture": "spark" in getattr(item, "fixturenames", ()),
            "marked": item.get_closest_marker("spark") is not None,
        }
        for item in session.items
    ]
    with open(os.environ["MARKS_OUT"], "w") as f:
        json.dump(rows, f)
"""


def test_every_test_that_needs_java_is_marked_spark(tmp_path: Path) -> None:
    (tmp_path / "marks_plugin.py").write_text(PLUGIN)
    out = tmp_path / "marks.json"
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {"PYTHONPATH": path, "MARKS_OUT": str(out)}
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "marks_plugin"]
    cmd += ["-p", "no:xdist", "-p", "no:cacheprovider", "-o", "addopts=", str(TESTS)]
    proc = subprocess.run(
        cmd, cwd=TESTS.parent, env=os.environ | env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(out.read_text())
    needs_java = [r for r in rows if r["folder"] == "spark_tests" or r["fixture"]]
    # both kinds exist, so the check below cannot pass on an empty list
    assert any(r["folder"] != "spark_tests" for r in needs_java)
    assert sum(r["folder"] == "spark_tests" for r in needs_java) > 100
    assert [r["id"] for r in needs_java if not r["marked"]] == []
    assert [r["id"] for r in rows if r["marked"] and r not in needs_java] == []
