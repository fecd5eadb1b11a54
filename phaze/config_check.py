"""Every config value checked before any work: one ConfigError naming the field and the allowed values.

`check_config(cfg)` is the first call of `phaze.run` and `phaze.evaluate` (`phaze.validate` checks every run of its
file the same way), so a bad value stops the job before anything is written to mlruns/ or the study storage;
`refusing_bad_config` turns it into one line on stderr and exit code 2 inside the Hydra job (taking back the output
folder Hydra made for it), and `run_cli` does the same for Hydra's own composition errors (an unknown config option,
a typo, a wrong type). Each group's own rules live in its structured config (phaze/schema/: `__post_init__`, run as the
typed config is built), the rules that read another group or a stage's registry in phaze.checks, one module per group,
run by the constructors of the typed inputs (StudySpec.of, ModelJob.of, PlanSpace.of); this module builds them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import signal
import sys

from hydra.core.override_parser.overrides_parser import OverridesParser

from phaze import schema
from phaze.checks.outputs import check_output_file, check_output_folder, figure_formats
from phaze.checks.tracking import check_tracking
from phaze.config import CONF_DIR, attach_models, presets, study_spec
from phaze.config_values import ConfigError
from phaze.job_output import discard_job_output
from phaze.search.spec import StudySpec

EXIT_CONFIG = 2
"""Exit status of a job stopped by a bad config (the command-line usage error of argparse and getopt)."""
SCHEMA_PREFIX = "base_"
"""Group entries that are schemas registered by phaze.schema, not choices (base_model, base_hw, ...)."""


def check_config(cfg) -> StudySpec:
    """The job config's StudySpec, or ConfigError for its first invalid value: building its typed inputs checks it (each
    group's own rules as the typed config is built, the study's as its StudySpec is, each model's as its ModelJob is)."""
    spec = study_spec(cfg)
    spec.jobs()
    return spec


def one_line(error: BaseException) -> str:
    """An error message on one line: Hydra's multi-line messages (option lists) joined."""
    text = str(error)
    options = getattr(error, "options", None)
    group = re.search(r"Available options in '([^']+)'", text)
    if options and group:
        names = ", ".join(o for o in options if not o.startswith(SCHEMA_PREFIX))
        return f"{text.strip().splitlines()[0]}; allowed values for {group.group(1)}: {names}"
    listed = re.search(r"Could not load '([\w/]+)/[^']+'", text)
    if listed:  # an unknown name in a list of group options (model=[a,b,...]): Hydra names no options
        return f"{text.strip().splitlines()[0].rstrip('.')}; allowed values for {listed.group(1)}: {', '.join(presets(listed.group(1)))}"
    cause = error.__cause__
    parts = [text] + ([str(cause)] if cause is not None and str(cause) not in text else [])
    line = " | ".join(" ".join(line.strip() for line in p.splitlines() if line.strip()) for p in parts)
    typo = re.search(r"Key '[^']+' not in '(\w+)'", line)
    node = getattr(schema, typo.group(1), None) if typo else None
    if node is not None and dataclasses.is_dataclass(node):
        line += f"; allowed keys: {', '.join(f.name for f in dataclasses.fields(node))}"
    if "is not a valid bool" in line:  # OmegaConf's message for a boolean field names no values
        line += "; allowed values: true, false"
    return line


def exit_on_config_error(error: BaseException) -> None:
    """Print `error: <one line>` to stderr, take back what Hydra wrote for the job, and exit with EXIT_CONFIG."""
    print(f"error: {one_line(error)}", file=sys.stderr)
    discard_job_output()
    sys.exit(EXIT_CONFIG)


EXIT_INTERRUPTED = 128 + signal.SIGINT
"""The shell's exit status of a command stopped by Ctrl-C (SIGINT)."""


def run_cli(main) -> None:
    """Run a @hydra.main entry point (its task under refusing_bad_config, which handles our ConfigErrors): Hydra's
    composition errors are one line on stderr and exit 2, a Ctrl-C one line and exit 130 (a search's study keeps its
    finished trials and resumes with the same command)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    os.environ["HYDRA_FULL_ERROR"] = "1"  # let Hydra's errors reach us instead of exiting 1 itself
    try:
        main()
    except (HydraException, OmegaConfBaseException) as e:
        exit_on_config_error(e)
    except KeyboardInterrupt:
        print("interrupted: a search resumes where it stopped when run again with the same command", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)


def refusing_bad_config(task):
    """An entry point's task whose ConfigErrors exit 2 with one line inside the Hydra job, where what Hydra wrote for
    the job can still be found and taken back (once the job ends Hydra forgets its folder); goes under @hydra.main."""

    @functools.wraps(task)
    def job(cfg):
        try:
            return task(cfg)
        except ConfigError as e:
            exit_on_config_error(e)

    return job


def check_choices(overrides) -> None:
    """A config group's schema (`model=base_model`, `train=base_train`, ...: phaze.config registers them beside the
    presets, so Hydra accepts them) is not a preset: a model without its shape, a chip without its parts."""
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        group = override.key_or_group
        value = override.value()
        names = value if isinstance(value, list) else [value]
        if (CONF_DIR / group).is_dir() and any(str(name).startswith(SCHEMA_PREFIX) for name in names):
            raise ConfigError(f"{override.input_line}: the schema every {group} preset extends, not a preset; "
                              f"allowed values for {group}: {', '.join(presets(group))}")


def checked(cfg, overrides=()) -> tuple:
    """The entry points' job config, checked: cfg with the models of a `model=[a,b,...]` override (attach_models), and
    its StudySpec (check_config), so that the entry point builds and checks it once."""
    check_choices(overrides)
    cfg = attach_models(cfg, overrides)
    return cfg, check_config(cfg)


__all__ = ["EXIT_CONFIG", "EXIT_INTERRUPTED", "SCHEMA_PREFIX", "check_choices", "check_config", "check_output_file",
           "check_output_folder", "check_tracking", "checked", "exit_on_config_error", "figure_formats", "one_line",
           "refusing_bad_config", "run_cli"]
