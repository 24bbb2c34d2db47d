"""Fixtures of the model tests."""

import jax
import pytest


@pytest.fixture(scope="module")
def fast_compiles():
    """Each compiled step in these tests runs once, so XLA's optimisation passes cost more than
    they save (ResNet-18's forward and backward compile in half the time without them)."""
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", previous)
