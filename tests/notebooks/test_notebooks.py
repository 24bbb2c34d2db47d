"""Every notebook in notebooks/ runs top to bottom (its own asserts check the results).

One test per notebook, so pytest-xdist can spread them. The executed copy is thrown away:
the committed files (with their outputs) are rewritten only by `python notebooks/execute.py`.
"""

import importlib.util
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
_spec = importlib.util.spec_from_file_location("notebook_execute", NOTEBOOK_DIR / "execute.py")
notebook_execute = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(notebook_execute)


def test_readme_lists_every_notebook():
    readme = (NOTEBOOK_DIR.parent / "README.md").read_text()
    missing = [p.name for p in NOTEBOOKS if f"`notebooks/{p.name}`" not in readme]
    assert NOTEBOOKS and not missing, f"README.md does not list {missing}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path):
    before = path.read_bytes()
    notebook_execute.execute(path, timeout=300)  # raises CellExecutionError on the first failing cell
    assert path.read_bytes() == before, "executing a notebook must not rewrite the committed file"
