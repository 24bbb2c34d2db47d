"""The benchmark scripts are files, not a package: `load_script("ab")` imports benchmarks/ab.py
as a module (each script puts benchmarks/ on sys.path itself, for _timing and models)."""

import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def load_script():
    return _load
