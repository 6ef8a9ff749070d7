"""Register a recommender in the MLflow model registry, following the harness's pyfunc contract.

    python examples/register_model.py --tracking-uri sqlite:///runs/mlflow.db --name popularity-demo

Fits a ``PopularityModel`` (``--model item_knn``: an ``ImplicitItemCosine``) on the synthetic data
(``harness.synthetic.generate`` with the given sizes and seed) on the events before the
``--train-cut`` timestamp quantile (default 0.8, the training part of the harness's default
``global_time`` split: fitted on every event, a model that leaves out the items a user has seen
would leave out exactly the test items and score 0),
wraps it in ``RecommenderPyfunc``, logs it with ``mlflow.pyfunc.log_model`` into
a new run, registers it as a new version of ``--name``, points the alias ``--alias`` at that
version and prints the ``models:/`` URIs. Without ``--alias`` the first version gets ``champion``
and later versions no alias: production's alias moves through the gate
(``gate.promote=champion``), not by registering. Evaluate it with the harness::

    python -m harness 'model=[popularity,mlflow]' model.mlflow.uri=models:/popularity-demo@champion

The contract ``harness.models.MLflowModel`` relies on:

- ``predict`` input: a DataFrame with columns ``user`` and ``k`` (int), one row per user;
- ``predict`` output: a DataFrame with columns ``user``, ``item``, ``score`` (finite float, higher
  is better), at most ``k`` rows per user, no repeated (user, item).

Serialization: the wrapper class is defined at module level here, so cloudpickle stores it by
value when this file runs as a script (and ``code_paths=[__file__]`` ships this file with the
model for when it is imported as a module instead). The wrapped model is pickled by reference to
``harness.models``: the ``harness`` package must be installed where the model is loaded.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
from mlflow import MlflowClient

from harness.models import ImplicitItemCosine, PopularityModel, Recommender, padding_mask
from harness.promote import alias_version, check_alias
from harness.split import make_split
from harness.synthetic import generate

ALIAS = "champion"
MODELS = {"popularity": PopularityModel, "item_knn": ImplicitItemCosine}


class RecommenderPyfunc(mlflow.pyfunc.PythonModel):
    """A fitted harness model behind the pyfunc contract (module doc)."""

    def __init__(self, model: Recommender) -> None:
        self.model = model

    def predict(
        self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> pd.DataFrame:
        """Rows (user, item, score): each user's top ``k`` of the wrapped model, padding dropped."""
        users = model_input["user"].to_numpy()
        ks = model_input["k"].to_numpy(dtype=np.int64)
        if users.size == 0:
            return pd.DataFrame({"user": users, "item": [], "score": np.zeros(0)})
        ids, scores = self.model.recommend(users, int(ks.max()))
        keep = (np.arange(ids.shape[1]) < ks[:, None]) & ~padding_mask(scores)
        return pd.DataFrame(
            {
                "user": np.repeat(users, ids.shape[1])[keep.ravel()],
                "item": ids[keep],
                "score": scores[keep],
            }
        )


def default_artifacts(tracking_uri: str) -> str | None:
    """Artifacts next to a local sqlite store (``DIR/artifacts``); a server decides its own."""
    if tracking_uri.startswith("sqlite:///"):
        return str(Path(tracking_uri.removeprefix("sqlite:///")).resolve().parent / "artifacts")
    return None


def register(
    tracking_uri: str,
    name: str,
    *,
    experiment: str = "model-registry",
    artifacts: str | None = None,
    n_users: int = 2000,
    n_items: int = 1000,
    n_events: int = 60000,
    seed: int = 0,
    model_kind: str = "popularity",
    train_cut: float | None = None,
    alias: str | None = None,
) -> dict[str, str | None]:
    """Fit, log, register and alias the model; return its ``models:/`` URIs and run id.
    ``alias`` None: ``champion`` when the model has none yet, else no alias."""
    alias = check_alias(
        alias, "--alias"
    )  # a bad alias: one line before anything is fitted or registered
    if train_cut is not None and not 0 < train_cut <= 1:
        raise ValueError(f"--train-cut must be in (0, 1] (got {train_cut})")
    if tracking_uri.startswith("sqlite:///"):
        Path(tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        location = artifacts or default_artifacts(tracking_uri)
        uri = Path(location).resolve().as_uri() if location else None
        experiment_id = client.create_experiment(experiment, artifact_location=uri)
    else:
        experiment_id = found.experiment_id

    train = generate(n_users, n_items, n_events, seed)
    if train_cut is not None and train_cut < 1:  # the training period, as the default split
        train = make_split(train, "global_time", cut=train_cut).train
    model = MODELS[model_kind]().fit(train)
    example = pd.DataFrame({"user": train["user"].unique()[:3], "k": np.full(3, 10)})
    with mlflow.start_run(experiment_id=experiment_id, run_name=f"register-{name}") as run:
        mlflow.log_params(
            {
                "model": type(model).__name__,
                "train_cut": train_cut,
                "n_users": n_users,
                "n_items": n_items,
                "n_events": n_events,
                "seed": seed,
            }
        )
        with warnings.catch_warnings():  # MLflow's hint about integer columns in the schema
            warnings.filterwarnings("ignore", "Hint: Inferred schema contains integer", UserWarning)
            info = mlflow.pyfunc.log_model(
                name="model",
                python_model=RecommenderPyfunc(model),
                registered_model_name=name,
                code_paths=[__file__],
                input_example=example,
                # Explicit requirements: inferring them loads the model in a subprocess (slow).
                pip_requirements=[f"mlflow=={mlflow.__version__}", "numpy", "pandas"],
            )
    version = str(info.registered_model_version)
    if alias is None and alias_version(client, name, ALIAS) is None:  # the first version
        alias = ALIAS
    if alias is not None:
        client.set_registered_model_alias(name, alias, version)
    return {
        "version_uri": f"models:/{name}/{version}",
        "alias_uri": f"models:/{name}@{alias}" if alias else None,
        "version": version,
        "run_id": run.info.run_id,
    }


def main(argv: list[str] | None = None) -> None:
    """Command line: parse arguments, register, print the URIs."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--tracking-uri", default="sqlite:///runs/mlflow.db")
    parser.add_argument("--name", default="popularity-demo", help="registered model name")
    parser.add_argument("--experiment", default="model-registry")
    parser.add_argument("--artifacts", default=None, help="artifact folder of a new experiment")
    parser.add_argument("--n-users", type=int, default=2000)
    parser.add_argument("--n-items", type=int, default=1000)
    parser.add_argument("--n-events", type=int, default=60000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", choices=sorted(MODELS), default="popularity")
    parser.add_argument(
        "--train-cut",
        type=float,
        default=0.8,
        help="fit on the events before this timestamp quantile (default 0.8, the harness's "
        "default split: the test period stays unseen; 1 fits on every event)",
    )
    parser.add_argument(
        "--alias",
        default=None,
        help=f"alias pointed at the new version (default: {ALIAS} for the first version, none "
        f"later: @{ALIAS} then moves only through the gate, gate.promote={ALIAS})",
    )
    args = parser.parse_args(argv)
    try:
        out = register(
            args.tracking_uri,
            args.name,
            experiment=args.experiment,
            artifacts=args.artifacts,
            n_users=args.n_users,
            n_items=args.n_items,
            n_events=args.n_events,
            seed=args.seed,
            model_kind=args.model,
            train_cut=args.train_cut,
            alias=args.alias,
        )
    except ValueError as err:
        parser.exit(2, f"error: {err}\n")
    print(f"registered {args.name} version {out['version']} (run {out['run_id']})")
    print(out["version_uri"])
    if out["alias_uri"]:
        print(out["alias_uri"])


if __name__ == "__main__":
    main()
