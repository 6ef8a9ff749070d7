"""The Hydra config tree; importing it registers the typed schemas the option files extend."""

from harness.schema import register

register()
