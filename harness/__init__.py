"""The evaluation harness: Hydra configs → data → split → models → metrics → MLflow."""
