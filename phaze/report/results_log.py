"""Benchmark results kept as a markdown log: each run appends its own dated section, the first one a title."""

from __future__ import annotations

from pathlib import Path


def append_section(path: Path, title: str, text: str) -> None:
    """Append `text` to the markdown file at `path`, writing `# title` first when the file is new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = "" if path.exists() else f"# {title}\n\n"
    with path.open("a") as f:
        f.write(head + text)
