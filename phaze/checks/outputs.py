"""Files and folders a command will write (evaluate's figure, validate's report, export's folder)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from phaze.config_values import ConfigError


def check_output_file(path: str, field: str, formats: tuple[str, ...] = ()) -> None:
    """A file a command will write: one of `formats` (its suffix) when given, in a folder that exists or can be made."""
    suffix = Path(path).suffix.lstrip(".").lower()
    if formats and suffix not in formats:
        raise ConfigError(f"{field}={path!r}: allowed: a file name ending in .{', .'.join(formats)}")
    check_output_folder(Path(path).parent, field, path)


def check_output_folder(folder, field: str, value=None) -> None:
    """A folder a command will write into (field's value: the folder, or a file in it): it exists or can be made there."""
    value = str(folder) if value is None else value
    folder = Path(folder).resolve()
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    try:
        with tempfile.TemporaryFile(dir=existing):  # a trial file, gone when closed: what os.access cannot tell for root
            pass
    except OSError as e:
        raise ConfigError(f"{field}={value!r}: cannot be written ({existing}: {e.strerror}); allowed: a path in a writable folder") from None


def figure_formats() -> tuple[str, ...]:
    """The file formats matplotlib writes (the suffixes savefig accepts)."""
    from matplotlib.backend_bases import FigureCanvasBase

    return tuple(sorted(FigureCanvasBase.get_supported_filetypes()))
