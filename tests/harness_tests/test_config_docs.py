"""Every config key is documented, and docs/config-reference.md is generated from those comments.

The comment scanner (``harness.configdoc``) is checked on small hand-written YAML files whose
documented and undocumented keys are known by construction; its key list is checked against
PyYAML's own parse of every real config file, so no key can escape the check.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import harness.configs
from harness.configdoc import config_files, read_config, render, undocumented

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = Path(harness.configs.__file__).parent
REFERENCE = ROOT / "docs" / "config-reference.md"
FILES = config_files(CONFIG_DIR)


def leaf_paths(data: Any, prefix: str = "") -> set[str]:
    """Dotted paths of the non-mapping values of parsed YAML (lists are values, not descended)."""
    if not isinstance(data, dict) or not data:
        return {prefix}
    paths: set[str] = set()
    for key, value in data.items():
        paths |= leaf_paths(value, f"{prefix}.{key}" if prefix else str(key))
    return paths


def write(tmp_path: Path, text: str, name: str = "grp/opt.yaml") -> Path:
    """A YAML file under a config root in tmp_path (group folder `grp`)."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ------------------------------------------------------------------------ the real config tree


def test_every_yaml_of_the_tree_is_scanned() -> None:
    on_disk = sorted(CONFIG_DIR.rglob("*.yaml"))
    assert sorted(FILES) == on_disk
    assert len(on_disk) >= 39  # the tree, not a few files (39 YAML files)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(CONFIG_DIR).as_posix())
def test_every_leaf_key_is_documented(path: Path) -> None:
    missing = undocumented(path, CONFIG_DIR)
    assert not missing, (
        "config keys without a comment (on their line or the line(s) directly above): "
        + ", ".join(missing)
    )


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(CONFIG_DIR).as_posix())
def test_scanner_finds_every_key_yaml_finds(path: Path) -> None:
    """The scanner's leaf keys are exactly PyYAML's (so the documentation check misses none)."""
    data = yaml.safe_load(path.read_text()) or {}
    data.pop("defaults", None)
    config = read_config(path, CONFIG_DIR)
    prefix = config.package + "." if config.package else ""
    expected = {prefix + p for p in leaf_paths(data)} if data else set()
    assert {k.path for k in config.keys if k.leaf} == expected


def test_every_file_says_what_it_is() -> None:
    silent = [p.relative_to(CONFIG_DIR).as_posix() for p in FILES if not read_config(p).header]
    assert not silent, f"config files without a leading comment: {silent}"


def test_reference_page_is_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness.configdoc"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == render()
    assert REFERENCE.read_text() == done.stdout, (
        "docs/config-reference.md is stale: python -m harness.configdoc > docs/config-reference.md"
    )


def test_reference_page_has_every_key_and_comment() -> None:
    page = REFERENCE.read_text()
    for path in FILES:
        for key in read_config(path).keys:
            if key.leaf:
                assert f"| `{key.path}` |" in page, key.path
    # A comment reaches the page as written (pipes escaped for the table).
    assert "| `split.unseen` | `drop` | drop \\| keep test users/items unseen in training" in page
    assert "docs/config-reference.md" in (ROOT / "README.md").read_text()


# ----------------------------------------------------------------------- the scanner itself


def test_inline_above_and_continuation_comments(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# What this option is.\n"
        "\n"
        "# above a\n"
        "# second line\n"
        "a: 1\n"
        "b: 'x # not a comment'   # b's own\n"
        "                         # b continued\n"
        "c: [1, 2]\n"
        "d:\n"
        "  e: null  # e\n"
        "  f: 2\n"
        "g: |   # a block of text\n"
        "  hello # inside the text\n"
        'h: "#"\n',
    )
    config = read_config(path, tmp_path)
    assert config.header == "What this option is."
    got = {k.path: (k.comment, k.leaf, k.default) for k in config.keys}
    assert got == {
        "grp.a": ("above a second line", True, "1"),
        "grp.b": ("b's own b continued", True, "'x # not a comment'"),
        "grp.c": ("", True, "[1, 2]"),  # the continuation belongs to b, not to c
        "grp.d": ("", False, ""),
        "grp.d.e": ("e", True, "null"),
        "grp.d.f": ("", True, "2"),
        "grp.g": ("a block of text", True, "(text)"),
        "grp.h": ("", True, '"#"'),
    }
    assert undocumented(path, tmp_path) == [
        "grp/opt.yaml:8 grp.c",
        "grp/opt.yaml:11 grp.d.f",
        "grp/opt.yaml:14 grp.h",
    ]


def test_file_header_is_not_the_first_keys_comment(tmp_path: Path) -> None:
    path = write(tmp_path, "# The file.\nfirst: 1\n# second's\nsecond: 2\n")
    assert undocumented(path, tmp_path) == ["grp/opt.yaml:2 grp.first"]


def test_list_items_documented_by_their_parent_and_packages(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# @package _global_\n# Bundle.\ndefaults:\n  - x\nrules:   # the rules\n"
        "  - {metric: m, margin: 0.1}\n  - metric: n\n    margin: 0.2\nother:\n  key: 3\n",
    )
    config = read_config(path, tmp_path)
    assert config.package == ""
    assert {k.path for k in config.keys} == {"rules", "other", "other.key"}
    assert undocumented(path, tmp_path) == ["grp/opt.yaml:10 other.key"]
    top = write(tmp_path, "# Top.\nseed: 0  # s\n", name="config.yaml")
    assert [k.path for k in read_config(top, tmp_path).keys] == ["seed"]
    named = write(tmp_path, "# @package elsewhere.deep\n# N.\nv: 1  # v\n", name="g2/o.yaml")
    assert [k.path for k in read_config(named, tmp_path).keys] == ["elsewhere.deep.v"]


def test_render_escapes_table_cells(tmp_path: Path) -> None:
    write(tmp_path, "# Top.\nmode: a  # a | b\n", name="config.yaml")
    page = render(tmp_path)
    assert "| `mode` | `a` | a \\| b |" in page
