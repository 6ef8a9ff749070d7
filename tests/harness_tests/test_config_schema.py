"""Typed configs: a misspelled or unknown key in any group fails Hydra's composition with one line
naming the key, the group and the keys it takes; every shipped option still matches its schema.

Composition is real: user option files (as a user would add with ``--config-dir``) are written to
``tmp_path`` and put on Hydra's search path; one case runs ``python -m harness`` in a subprocess.
The expected keys come from the spec dataclasses and split functions the code builds (the one
source of truth) and from the shipped YAML files read without Hydra.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

import harness.configs
from harness.candidates import CandidateSpec
from harness.cli import compare_spec_of, gate_spec_of
from harness.compare import CompareSpec
from harness.experiment import MetricSuite
from harness.gate import GateSpec, GsbRule, GuardrailRule, PrimaryRule
from harness.schema import SCHEMA_GROUPS, SCHEMAS, config_error
from harness.split import METHODS, apply_filters
from harness.tune import TuneSpec

CONFIG_DIR = Path(harness.configs.__file__).parent


def compose_with(tmp_path: Path, *overrides: str):
    """Compose the real config with ``tmp_path`` on the search path (user option files)."""
    with initialize_config_module(config_module="harness.configs", version_base=None):
        return compose(
            config_name="config",
            overrides=[f"hydra.searchpath=[file://{tmp_path}]", *overrides],
        )


def write_option(tmp_path: Path, group: str, extends: str | None, body: str) -> None:
    folder = tmp_path / group
    folder.mkdir(parents=True, exist_ok=True)
    head = f"defaults:\n  - {extends}\n  - _self_\n" if extends else ""
    (folder / "mine.yaml").write_text(head + body)


def composition_error(tmp_path: Path, group: str, *overrides: str) -> str:
    with pytest.raises(ConfigCompositionException) as err:
        compose_with(tmp_path, f"{group}=mine", *overrides)
    text = config_error(err.value)
    assert "\n" not in text
    return text


def split_keys(method: str) -> list[str]:
    """The keys a split method takes: ``method``, its keyword parameters, the filters."""
    params = [
        p.name
        for f in (METHODS[method], apply_filters)
        for p in inspect.signature(f).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    return ["method", *params]


def names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


# (group, option extended, misspelled line(s), full key, the keys the message must list)
MISSPELLED = [
    ("dataset", "synthetic", "n_user: 10\n", "dataset.n_user", ["n_users", "n_items", "seed"]),
    ("dataset", "file", "path: x.csv\ncolumn: {user: u}\n", "dataset.column", ["columns"]),
    ("split", "global_time", "vaild_cut: 0.7\n", "split.vaild_cut", split_keys("global_time")),
    ("split", "user_time", "valid_ration: 0.1\n", "split.valid_ration", split_keys("user_time")),
    ("split", "random", "test_ration: 0.1\n", "split.test_ration", split_keys("random")),
    # a key of another method is unknown to this one
    ("split", "leave_one_out", "cut: 0.5\n", "split.cut", split_keys("leave_one_out")),
    ("metrics", "default", "relevence: rating\n", "metrics.relevence", names(MetricSuite)),
    ("candidates", "sampled", "n_negative: 5\n", "candidates.n_negative", names(CandidateSpec)),
    ("compare", "default", "baseline_model: als\n", "compare.baseline_model", names(CompareSpec)),
    (
        "gate",
        "default",
        "primary: {metric: ndcg@10, min_lfit: 0.1}\n",
        "gate.primary.min_lfit",
        names(PrimaryRule),
    ),
    ("gate", "default", "gsb: {min_delt: 0.1}\n", "gate.gsb.min_delt", names(GsbRule)),
    ("gate", "default", "enfore: true\n", "gate.enfore", names(GateSpec)),
    ("tracking", "local", "url: http://x\n", "tracking.url", ["uri", "artifacts", "enabled"]),
    ("engine", "numpy", "batch_user: 10\n", "engine.batch_user", ["name", "batch_users"]),
    ("engine", "spark", "bucket: 4\n", "engine.bucket", ["buckets", "shuffle_partitions"]),
    ("tune", "default", "trial: 3\n", "tune.trial", names(TuneSpec)),
]


@pytest.mark.parametrize(
    ("group", "extends", "body", "full_key", "allowed"),
    MISSPELLED,
    ids=[c[3] for c in MISSPELLED],
)
def test_a_misspelled_key_fails_composition(tmp_path, group, extends, body, full_key, allowed):
    write_option(tmp_path, group, extends, body)
    text = composition_error(tmp_path, group)
    start = f"unknown config key '{full_key}' in group '{group}' ({group}/mine); it takes: "
    assert text.startswith(start), text
    listed = text.removeprefix(start).split(", ")
    assert set(allowed) <= set(listed), (allowed, listed)
    assert full_key.rsplit(".", 1)[1] not in listed
    assert "result" not in listed  # tune.result: written by harness.tune, not a user's key


def test_a_misspelled_key_in_a_guardrail_names_the_gate(tmp_path: Path) -> None:
    write_option(tmp_path, "gate", "default", "guardrails:\n  - {metric: ndcg@10, margn: 0.1}\n")
    text = composition_error(tmp_path, "gate")
    assert text == (
        "unknown config key 'margn' in an item of 'gate.guardrails' (gate/mine); it takes: "
        + ", ".join(names(GuardrailRule))
    )


def test_guardrail_mistakes_on_the_command_line_name_the_list(tmp_path: Path) -> None:
    write_option(tmp_path, "gate", "default", "")
    typo = composition_error(tmp_path, "gate", "gate.guardrails=[{metric: ndcg@10, margn: 0.1}]")
    assert typo.startswith("unknown config key 'margn' in an item of 'gate.guardrails'; it takes")
    mapping = composition_error(tmp_path, "gate", "gate.guardrails={metric: ndcg@10}")
    assert mapping == (
        "bad config value at 'gate.guardrails' in group 'gate': it must be a list "
        "such as [{key: value}], not a mapping"
    )


def test_command_line_typos_read_as_in_a_file(tmp_path: Path) -> None:
    """A misspelled key or option on the command line gets the message a file's would: the
    keys a schema takes, the + that adds a key to an open model config, the shipped options."""
    from hydra.errors import MissingConfigException

    def error(*overrides: str) -> str:
        with pytest.raises((ConfigCompositionException, MissingConfigException)) as err:
            compose_with(tmp_path, *overrides)
        return config_error(err.value)

    assert error("gate.primary.min_lfit=0.1") == (
        "unknown config key 'gate.primary.min_lfit' in group 'gate'; it takes: "
        + ", ".join(names(PrimaryRule))
    )
    assert error("model.item_knn.k_neighbours=5") == (
        "unknown config key 'model.item_knn.k_neighbours' in group 'model'; a key the config "
        "does not have is added with a leading + (+model.item_knn.k_neighbours=...)"
    )
    # found by a walkthrough: the + hint here led to a second error (no such column name)
    assert error("dataset=file", "dataset.path=x.csv", "dataset.columns.itme=id") == (
        "unknown config key 'dataset.columns.itme' in group 'dataset'; dataset.columns takes: "
        "user, item, timestamp, rating"
    )
    shipped = sorted(p.stem for p in (CONFIG_DIR / "model").glob("*.yaml"))
    assert "item_knn" in shipped and "popularity" in shipped
    assert error("model=[popularity,item_nn]") == (
        f"no model config 'item_nn'; built-in options: {', '.join(shipped)}"
    )


def test_a_misspelled_top_level_key_fails(tmp_path: Path) -> None:
    write_option(tmp_path, "experiment", None, "# @package _global_\nsed: 3\n")
    text = composition_error(tmp_path, "experiment")
    assert text.startswith("unknown config key 'sed' in the top level (experiment/mine); it takes")
    assert "seed" in text and "runs_dir" in text


def test_a_value_of_the_wrong_type_fails(tmp_path: Path) -> None:
    write_option(tmp_path, "compare", "default", "n_resamples: lots\n")
    text = composition_error(tmp_path, "compare")
    assert text.startswith(
        "bad config value at 'compare.n_resamples' in group 'compare' (compare/mine): Value 'lots'"
    )


def test_models_stay_open(tmp_path: Path) -> None:
    """A model config is its ``_target_`` class's parameters: any key composes."""
    write_option(
        tmp_path,
        "model",
        None,
        "mine:\n  _target_: harness.models.ImplicitItemCosine\n  k_neighbors: 7\n",
    )
    cfg = compose_with(tmp_path, "model=[popularity,mine]")
    assert cfg.model.mine.k_neighbors == 7


@pytest.mark.parametrize("module", ["harness", "harness.tune"])
def test_cli_prints_one_line_and_exits_2(tmp_path: Path, module: str) -> None:
    write_option(tmp_path / "conf", "gate", "default", "primary: {metric: ndcg@10, min_lfit: 1}\n")
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            module,
            "--config-dir",
            str(tmp_path / "conf"),
            "gate=mine",
            f"runs_dir={runs}",
            "tracking=none",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "error: unknown config key 'gate.primary.min_lfit' in group 'gate' (gate/mine); "
        "it takes: metric, segment, min_lift"
    )
    assert not (runs / "results").exists()  # nothing ran


# ------------------------------------------------------------- every shipped option matches


def shipped() -> list[tuple[str, str]]:
    return [(g, p.stem) for g in SCHEMA_GROUPS for p in sorted((CONFIG_DIR / g).glob("*.yaml"))]


@pytest.mark.parametrize(("group", "option"), shipped(), ids=lambda v: str(v))
def test_every_shipped_option_is_typed(tmp_path: Path, group: str, option: str) -> None:
    cfg = compose_with(tmp_path, f"{group}={option}")
    node = cfg[group]
    typed = OmegaConf.get_type(node)
    assert dataclasses.is_dataclass(typed), f"{group}={option} is not typed"
    assert typed in SCHEMAS.values()
    written = yaml.safe_load((CONFIG_DIR / group / f"{option}.yaml").read_text()) or {}
    keys = {f.name for f in dataclasses.fields(typed)}
    assert set(written) - {"defaults"} <= keys
    if group == "split":
        assert set(keys) == set(split_keys(node.method))


def test_schemas_have_the_spec_keys() -> None:
    """Generated, not written twice: each schema has exactly its spec's fields."""
    for (group, name), spec in [
        (("metrics", "suite"), MetricSuite),
        (("candidates", "candidates"), CandidateSpec),
        (("compare", "compare"), CompareSpec),
        (("gate", "gate"), GateSpec),
    ]:
        assert names(SCHEMAS[(group, name)]) == names(spec)
    assert names(SCHEMAS[("tune", "tune")]) == [*names(TuneSpec), "result"]


def test_gate_rules_are_typed_objects(tmp_path: Path) -> None:
    cfg = compose_with(tmp_path, "gate=strict")
    gate = gate_spec_of(cfg)
    assert gate.primary == PrimaryRule(metric="ndcg@10", segment="all", min_lift=0.02)
    assert gate.gsb == GsbRule(metric="ndcg@10", min_delta=0.02)
    assert gate.guardrails[2] == GuardrailRule(metric="ndcg@10", segment="items:tail", margin=0.05)
    assert all(isinstance(g, GuardrailRule) for g in gate.guardrails)
    assert compare_spec_of(cfg).baseline == "popularity"
