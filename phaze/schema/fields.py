"""What the structured configs share without importing OmegaConf, so that a stage importing a config dataclass
starts without Hydra or OmegaConf (phaze.config registers the dataclasses with Hydra)."""

from dataclasses import fields

MISSING = "???"
"""A mandatory field's default: OmegaConf's marker of a value that a preset must give (omegaconf.MISSING is this
string; tests/test_stage_inputs.py checks they agree)."""


def complete(obj) -> bool:
    """Whether every field of a config dataclass has a value: a group's schema built with its own defaults (as a
    default_factory does) leaves the mandatory ones MISSING, and is a template, not a config to check."""
    return not any(isinstance(getattr(obj, f.name), str) and getattr(obj, f.name) == MISSING for f in fields(obj))
