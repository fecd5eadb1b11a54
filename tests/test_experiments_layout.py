"""experiments/ as a harness (issue 46, item 5): run as modules from the repository root, so no experiment edits sys.path;
what the tests need lives in the phaze package, so no test imports an experiment; experiments share code through the
harness and shared modules, never by importing another experiment's script."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted((ROOT / "experiments").rglob("*.py"))
TESTS = sorted((ROOT / "tests").rglob("*.py"))


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def imported(path: Path) -> set[str]:
    """Every module `path` imports (absolute names)."""
    names = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(f"{package}.")


def is_script(path: Path) -> bool:
    """Whether the module runs as a program (an `if __name__ == "__main__":` block)."""
    return any(isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
               and node.test.left.id == "__name__" for node in tree(path).body)


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_layout_is_found():
    assert len(EXPERIMENTS) > 30 and len(TESTS) > 30


@pytest.mark.parametrize("path", TESTS, ids=relative)
def test_no_test_imports_an_experiment(path):
    assert not [name for name in imported(path) if within(name, "experiments")]


@pytest.mark.parametrize("path", EXPERIMENTS, ids=relative)
def test_no_experiment_edits_sys_path_or_imports_the_tests(path):
    touches = [node.lineno for node in ast.walk(tree(path))
               if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) and node.value.id == "sys"]
    assert not touches, f"sys.path at lines {touches}"
    assert not [name for name in imported(path) if within(name, "tests")]


@pytest.mark.parametrize("path", EXPERIMENTS, ids=relative)
def test_experiments_import_shared_modules_not_scripts(path):
    for name in imported(path):
        if within(name, "experiments"):
            module = ROOT / Path(*name.split("."))
            target = module.with_suffix(".py") if module.with_suffix(".py").exists() else module / "__init__.py"
            assert target.exists(), name
            assert not is_script(target), f"{relative(path)} imports the script {name}"


def test_every_experiment_folder_is_a_package():
    folders = {path.parent for path in EXPERIMENTS}
    assert all((folder / "__init__.py").exists() for folder in folders)


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "experiments").rglob("*.md")), *EXPERIMENTS]
MODULE_COMMAND = re.compile(r"python -m\s+(experiments(?:\.\w+)+)")
SCRIPT_PATH = re.compile(r"\bexperiments/[\w/]+\.py\b")
SCRIPT_COMMAND = re.compile(r"python\s+experiments/\w+/")
"""A script in a folder run by its path: without the repository root on sys.path its imports fail."""


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_the_experiments_named_exist_and_run_as_modules(page):
    text = page.read_text()
    for module in MODULE_COMMAND.findall(text):
        assert (ROOT / Path(*module.split("."))).with_suffix(".py").exists(), module
    for path in SCRIPT_PATH.findall(text):
        assert (ROOT / path).exists(), path
    assert not SCRIPT_COMMAND.findall(text)
