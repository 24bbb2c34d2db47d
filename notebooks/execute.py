"""Re-execute notebooks in place, so the committed files carry their outputs (tables, plots).

    python notebooks/execute.py                 # every notebook in notebooks/
    python notebooks/execute.py quickstart      # some of them, by name

Run it from the repository root with the environment the tests use (jaxdl importable). Each
notebook runs in a fresh kernel with notebooks/ as its working directory; the time each took is
printed. The test suite (tests/notebooks/test_notebooks.py) executes the notebooks without saving.
"""

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).parent


def execute(path, timeout=600):
    """Runs the notebook at `path` top to bottom and returns it with its outputs."""
    notebook = nbformat.read(path, as_version=4)
    # record_timing=False: no timestamps in the cell metadata, so re-running changes only outputs.
    NotebookClient(notebook, timeout=timeout, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return notebook


def main(names):
    paths = [HERE / f"{name}.ipynb" for name in names] or sorted(HERE.glob("*.ipynb"))
    for path in paths:
        start = time.perf_counter()
        nbformat.write(execute(path), path)
        print(f"{path.name}: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
