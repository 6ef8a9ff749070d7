"""The config reference, generated from the comments of the YAML files in ``harness/configs``.

Every key of every config file carries its documentation as a YAML comment: on its own line
(after the value), on continuation lines starting at that comment's column, or in a block of
comment lines directly above it. A file's leading comment block describes the file. This module
reads those comments (PyYAML finds the keys and their lines; comments are read from the text)
and renders one Markdown page::

    python -m harness.configdoc > docs/config-reference.md
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
# Hydra directives, not settings: the defaults list is the group selection, documented by its file.
SKIPPED_KEYS = ("defaults",)
# Group folders in the order a run uses them; any other folder follows alphabetically.
GROUP_ORDER = (
    "dataset",
    "split",
    "model",
    "candidates",
    "metrics",
    "compare",
    "gate",
    "tracking",
    "engine",
    "experiment",
    "tune",
    "hydra/help",
)
_INLINE = re.compile(r"^\s+#\s?(.*)$")  # after a value: at least one space, then the comment
_COMMENT_LINE = re.compile(r"^(\s*)#\s?(.*)$")
_PACKAGE = re.compile(r"^#\s*@package\s+(\S+)")


@dataclass(frozen=True)
class Key:
    """One key of a config file: its dotted path, default as written, comment and kind."""

    path: str
    default: str
    comment: str
    leaf: bool
    line: int  # 1-based line of the key in its file


@dataclass(frozen=True)
class ConfigFile:
    """A config file: where it is, the package its keys land in, its description and keys."""

    path: Path
    package: str
    header: str
    keys: tuple[Key, ...]


def _is_leaf(node: Node) -> bool:
    """A key is a leaf unless its value is a block mapping whose keys are documented one by one."""
    return not (isinstance(node, MappingNode) and not node.flow_style and node.value)


def _is_block(node: Node) -> bool:
    """True when the value starts on the line after its key (block collection or block scalar)."""
    if isinstance(node, ScalarNode):
        return node.style in ("|", ">")
    return isinstance(node, MappingNode | SequenceNode) and not node.flow_style and bool(node.value)


def _header(lines: list[str]) -> tuple[str, str | None, int]:
    """The leading comment block as Markdown (indented lines are commands: a code block), the
    ``@package`` it names and the number of lines it spans."""
    prose: list[str] = []
    code: list[str] = []
    blocks: list[str] = []
    package, n = None, 0

    def flush_prose() -> None:
        if prose:
            blocks.append(" ".join(prose))
            prose.clear()

    def flush_code() -> None:
        if code:
            blocks.append("```bash\n" + "\n".join(code) + "\n```")
            code.clear()

    for line in lines:
        match = _COMMENT_LINE.match(line)
        if not match or match.group(1):
            break
        n += 1
        directive = _PACKAGE.match(line)
        body = line.lstrip()[1:]
        if directive:
            package = directive.group(1)
        elif body.startswith("   ") and body.strip():  # '#   command': a command line
            flush_prose()
            code.append(body.strip())
        elif body.strip():
            flush_code()
            prose.append(body.strip())
    flush_prose()
    flush_code()
    return "\n\n".join(blocks), package, n


def _inline(lines: list[str], key: Node, value: Node) -> tuple[str, list[int]] | None:
    """The comment at the end of the key's entry and the lines it spans (0-based), if any."""
    if _is_block(value):
        line_no = key.end_mark.line
        rest = lines[line_no][key.end_mark.column :]
        match = re.match(r"^\s*:\s*(?:[|>][-+]?\s*)?(?:#\s?(.*))?$", rest)
        text = match.group(1) if match else None
    else:
        line_no = value.end_mark.line
        start = value.end_mark.column
        rest = lines[line_no][start:] if line_no < len(lines) else ""
        match = _INLINE.match(rest) or (re.match(r"^#\s?(.*)$", rest) if rest[:1] == "#" else None)
        text = match.group(1) if match else None
    if text is None:
        return None
    column = len(lines[line_no]) - len(rest) + rest.index("#")
    # Continuation lines: comment-only lines right below whose '#' sits at the same column.
    parts, spans = [text.strip()], [line_no]
    for i in range(line_no + 1, len(lines)):
        cont = _COMMENT_LINE.match(lines[i])
        if not cont or len(cont.group(1)) != column:
            break
        parts.append(cont.group(2).strip())
        spans.append(i)
    return " ".join(p for p in parts if p), spans


def _above(lines: list[str], line_no: int, header_end: int, claimed: set[int]) -> str:
    """The comment lines directly above a key: not the file's leading block, nor a blank line,
    nor the continuation of the previous key's comment."""
    block: list[str] = []
    i = line_no - 1
    while i >= header_end and i not in claimed:
        match = _COMMENT_LINE.match(lines[i])
        if not match:
            break
        block.append(match.group(2).strip())
        i -= 1
    if i < header_end and header_end:  # reached the file's own leading block: not this key's
        return ""
    return " ".join(t for t in reversed(block) if t)


def _default(source: str, node: Node) -> str:
    """The value as written in the file, on one line."""
    if isinstance(node, ScalarNode) and node.style in ("|", ">"):
        return "(text)"
    if isinstance(node, SequenceNode) and not node.flow_style:
        items = [_default(source, item) for item in node.value]
        return "[" + ", ".join(items) + "]"
    text = source[node.start_mark.index : node.end_mark.index]
    return " ".join(text.split())


def read_config(path: Path, root: Path = CONFIG_DIR) -> ConfigFile:
    """Parse one config file into its description and its documented keys."""
    source = path.read_text()
    lines = source.splitlines()
    header, package, header_end = _header(lines)
    group = path.parent.relative_to(root).as_posix()
    if package == "_global_" or group == ".":
        prefix = ""
    elif package in (None, "_group_"):
        prefix = group.replace("/", ".")
    else:
        prefix = package
    keys: list[Key] = []
    claimed: set[int] = set()  # lines of comments already read as a key's own

    def visit(node: MappingNode, parent: str, top: bool) -> None:
        for key, value in node.value:
            name = str(key.value)
            if top and name in SKIPPED_KEYS:
                continue
            dotted = f"{parent}.{name}" if parent else name
            line_no = key.start_mark.line
            above = _above(lines, line_no, header_end, claimed)
            found = _inline(lines, key, value)
            if found:
                claimed.update(found[1])
            comment = " ".join(t for t in (above, found[0] if found else "") if t)
            leaf = _is_leaf(value)
            default = _default(source, value) if leaf else ""
            keys.append(Key(dotted, default, comment, leaf, line_no + 1))
            if isinstance(value, MappingNode) and not leaf:
                visit(value, dotted, False)

    root_node = yaml.compose(source)
    if isinstance(root_node, MappingNode):
        visit(root_node, prefix, True)
    return ConfigFile(path, prefix, header, tuple(keys))


def config_files(root: Path = CONFIG_DIR) -> list[Path]:
    """Every YAML file of the config tree: the primary config, then the groups in run order."""
    groups = sorted({p.parent.relative_to(root).as_posix() for p in root.rglob("*.yaml")} - {"."})
    ordered = [g for g in GROUP_ORDER if g in groups] + [g for g in groups if g not in GROUP_ORDER]
    files = sorted(root.glob("*.yaml"))
    for group in ordered:
        files += sorted((root / group).glob("*.yaml"))
    return files


def undocumented(path: Path, root: Path = CONFIG_DIR) -> list[str]:
    """Leaf keys of a file without a comment, as ``file:line key`` (empty: all documented)."""
    config = read_config(path, root)
    return [
        f"{path.relative_to(root).as_posix()}:{k.line} {k.path}"
        for k in config.keys
        if k.leaf and not k.comment
    ]


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """Inline code that survives backticks in the text (empty: nothing)."""
    if not text:
        return ""
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{_cell(text)}{pad}{fence}"


def _defaults(path: Path) -> list[str]:
    """The group options a primary config selects, as ``group=option`` code spans."""
    chosen = []
    for entry in (yaml.safe_load(path.read_text()) or {}).get("defaults", []):
        if not isinstance(entry, dict):
            continue
        for group, option in entry.items():
            group = str(group).removeprefix("optional ")
            if group.startswith("override ") or option is None:
                continue
            if isinstance(option, list):
                option = "[" + ",".join(map(str, option)) + "]"
            chosen.append(f"`{group}={option}`")
    return chosen


def render(root: Path = CONFIG_DIR) -> str:
    """The Markdown reference page of every config file and key under ``root``."""
    out = [
        "# Configuration reference",
        "",
        "Generated from the comments in the YAML files of `configs/` (the package's",
        "`harness/configs`) by `python -m harness.configdoc > docs/config-reference.md`; edit the",
        "comments, not this page (a test fails when it is out of date). Select an option of a",
        "group with `GROUP=OPTION` and set a key with `KEY=VALUE` on the command line, e.g.",
        "`recsys-harness split=leave_one_out split.min_history=3`; `recsys-harness --help` lists",
        "the groups and `recsys-harness --cfg job` prints the composed config.",
        "",
    ]
    current = None
    for path in config_files(root):
        config = read_config(path, root)
        group = path.parent.relative_to(root).as_posix()
        rel = path.relative_to(root).as_posix()
        if group == ".":
            out += [f"## Top level (`{rel}`)", ""]
        else:
            if group != current:
                out += [f"## Group `{group}`", ""]
                current = group
            out += [f"### `{group}={path.stem}` (`{rel}`)", ""]
        if config.header:
            out += [config.header, ""]
        chosen = _defaults(path) if group == "." else []
        if chosen:
            out += ["Options selected by default: " + ", ".join(chosen) + ".", ""]
        if config.keys:
            out += ["| key | default | what it does |", "|---|---|---|"]
            for key in config.keys:
                if not key.leaf and not key.comment:  # a section whose keys follow
                    continue
                default = _code(key.default) if key.leaf else ""
                out.append(f"| `{key.path}` | {default} | {_cell(key.comment)} |")
            out.append("")
    return "\n".join(out)


def main() -> int:
    """Print the reference page (exit 0)."""
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
