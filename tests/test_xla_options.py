"""The compiler options dl.jit passes to XLA on CPU (jaxdl/_xla_options.py)."""

import re

import jax
import jax.numpy as jnp

import jaxdl as dl
from jaxdl import _xla_options as xla_options
from jaxdl import nn


def _conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def test_options_keep_convolutions_and_elementwise_out_of_ynnpack_dots_and_reductions_in():
    options = dl.xla_compiler_options()
    assert options is not None, "this XLA no longer accepts the option: re-measure and update"
    x, w = jnp.ones((2, 8, 8, 16)), jnp.ones((3, 3, 16, 32))
    default = jax.jit(_conv).lower(x, w).compile().as_text()
    ours = jax.jit(_conv, compiler_options=options).lower(x, w).compile().as_text()
    assert "__ynn_fusion" in default and "__ynn_fusion" not in ours  # the convolution is XLA's own
    a = jnp.ones((64, 64))
    for fn, ynn in [(jnp.matmul, True), (lambda a, b: jnp.sum(a * b, axis=1), True),
                    (lambda a, b: jax.nn.gelu(a) * b, False)]:
        text = jax.jit(fn, compiler_options=options).lower(a, a).compile().as_text()
        assert ("__ynn_fusion" in text) == ynn, text


def _sgd_step(w, x):
    """A linear layer's update with its input gradient: the gradient reads the old weight."""
    gw, gx = jax.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w.T)), argnums=(0, 1))(w, x)
    return w - 0.1 * gw, gx


def test_a_donated_weight_read_by_the_input_gradient_is_updated_without_a_copy():
    w, x = jnp.ones((64, 32)), jnp.ones((2, 32))

    def copied_parameters(options):
        text = jax.jit(_sgd_step, donate_argnums=0, compiler_options=options).lower(w, x) \
            .compile().as_text()
        return re.findall(r"copy\(%w\S*\)", text)

    assert copied_parameters(None), "XLA no longer copies it by default: re-measure and update"
    assert copied_parameters(dl.xla_compiler_options()) == []
    # and the update is still right
    new_w, gx = jax.jit(_sgd_step, donate_argnums=0, compiler_options=dl.xla_compiler_options())(
        jnp.ones((64, 32)), x)
    want_w, want_gx = _sgd_step(w, x)
    assert jnp.allclose(new_w, want_w) and jnp.allclose(gx, want_gx)


def test_an_option_set_in_xla_flags_wins(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=")
    assert dl.xla_compiler_options() == {xla_options._REGION_COPIES: True}
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type= "
                                    "--xla_cpu_copy_insertion_use_region_analysis=false")
    assert dl.xla_compiler_options() is None


def test_an_option_this_xla_does_not_know_is_left_out(monkeypatch):
    monkeypatch.setitem(xla_options._CPU_OPTIONS, "xla_cpu_no_such_option", True)
    options = dl.xla_compiler_options()
    assert "xla_cpu_no_such_option" not in options and xla_options._REGION_COPIES in options


def test_dl_jit_compiles_with_them(monkeypatch):
    asked = []
    real = xla_options.xla_compiler_options
    monkeypatch.setattr(xla_options, "xla_compiler_options", lambda: asked.append(1) or real())
    model = nn.Conv2d(16, 4, 3)
    out = dl.jit(lambda m, x: m(x))(model, jnp.ones((1, 16, 5, 5)))
    assert out.shape == (1, 4, 3, 3) and asked
