"""The rest of torch.nn.functional (shrinks, prelu, shuffles, 3-d pools, distances, margin
losses): forward values and input gradients against PyTorch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jaxdl.nn.functional as F

rng = np.random.default_rng(0)


def arr(*shape, positive=False):
    x = rng.standard_normal(shape).astype(np.float32)
    return np.abs(x) + 0.1 if positive else x


def sign_target(n):
    return np.where(rng.random(n) < 0.5, -1.0, 1.0).astype(np.float32)


# name -> (function name, float inputs, constant inputs, keyword arguments)
CASES = {
    "softmin": ("softmin", [arr(4, 7)], [], dict(dim=1)),
    "hardshrink": ("hardshrink", [arr(5, 6)], [], dict(lambd=0.3)),
    "softshrink": ("softshrink", [arr(5, 6)], [], dict(lambd=0.3)),
    "tanhshrink": ("tanhshrink", [arr(5, 6)], [], {}),
    "rrelu-eval": ("rrelu", [arr(5, 6)], [], dict(training=False)),
    "prelu-channels": ("prelu", [arr(2, 3, 4, 4), arr(3, positive=True)], [], {}),
    "prelu-single": ("prelu", [arr(2, 3, 4), arr(1, positive=True)], [], {}),
    "pixel_shuffle": ("pixel_shuffle", [arr(2, 8, 3, 5)], [], dict(upscale_factor=2)),
    "pixel_unshuffle": ("pixel_unshuffle", [arr(2, 2, 6, 4)], [], dict(downscale_factor=2)),
    "channel_shuffle": ("channel_shuffle", [arr(2, 6, 3, 3)], [], dict(groups=3)),
    "max_pool3d": ("max_pool3d", [arr(2, 3, 5, 6, 7)], [], dict(kernel_size=2, stride=2, ceil_mode=True)),
    "avg_pool3d": ("avg_pool3d", [arr(2, 3, 5, 6, 7)], [], dict(kernel_size=3, stride=2, padding=1)),
    "adaptive_avg_pool3d": ("adaptive_avg_pool3d", [arr(2, 3, 5, 6, 7)], [], dict(output_size=(2, 3, 4))),
    "adaptive_max_pool3d": ("adaptive_max_pool3d", [arr(2, 3, 5, 6, 7)], [], dict(output_size=(2, 3, 4))),
    "lp_pool1d": ("lp_pool1d", [arr(2, 3, 9, positive=True)], [], dict(norm_type=2, kernel_size=3)),
    "lp_pool2d": ("lp_pool2d", [arr(2, 3, 6, 7, positive=True)], [],
                  dict(norm_type=3, kernel_size=2, stride=2)),
    "cosine_similarity": ("cosine_similarity", [arr(4, 5), arr(4, 5)], [], dict(dim=1)),
    "pairwise_distance": ("pairwise_distance", [arr(4, 5), arr(4, 5)], [], dict(p=3.0)),
    "pdist": ("pdist", [arr(5, 4)], [], dict(p=2.0)),
    "cosine_embedding_loss": ("cosine_embedding_loss", [arr(6, 5), arr(6, 5)], [sign_target(6)],
                              dict(margin=0.2)),
    "hinge_embedding_loss": ("hinge_embedding_loss", [arr(6, 5)], [np.sign(arr(6, 5))], dict(margin=0.5)),
    "margin_ranking_loss": ("margin_ranking_loss", [arr(7), arr(7)], [sign_target(7)], dict(margin=0.1)),
    "soft_margin_loss": ("soft_margin_loss", [arr(4, 5)], [np.sign(arr(4, 5))], {}),
    "multilabel_soft_margin_loss": ("multilabel_soft_margin_loss", [arr(4, 5)],
                                    [(rng.random((4, 5)) < 0.5).astype(np.float32)], {}),
    "poisson_nll_loss": ("poisson_nll_loss", [arr(4, 5)], [arr(4, 5, positive=True) * 3], dict(full=True)),
    "gaussian_nll_loss": ("gaussian_nll_loss", [arr(4, 5), arr(4, 5), arr(4, 5, positive=True)], [],
                          dict(full=True)),
    "triplet_margin_loss": ("triplet_margin_loss", [arr(4, 5), arr(4, 5), arr(4, 5)], [],
                            dict(margin=0.5, swap=True)),
    "multi_margin_loss": ("multi_margin_loss", [arr(4, 6)], [rng.integers(0, 6, 4)],
                          dict(p=2, margin=0.7, weight=np.linspace(0.5, 1.5, 6).astype(np.float32))),
    "upsample_bilinear": ("upsample_bilinear", [arr(1, 2, 3, 4)], [], dict(scale_factor=2)),
    "lp_pool3d": ("lp_pool3d", [arr(2, 2, 5, 4, 7, positive=True)], [],
                  dict(norm_type=2, kernel_size=(2, 3, 2), stride=(2, 1, 3), ceil_mode=True)),
    "multilabel_margin_loss": ("multilabel_margin_loss", [arr(3, 5)],
                               [np.array([[3, 0, -1, 1, 4], [1, 2, 3, 4, 0], [-1, 2, 2, 1, 0]])], {}),
    "multilabel_margin_loss-1d-none": ("multilabel_margin_loss", [arr(4)], [np.array([2, 2, -1, 0])],
                                       dict(reduction="none")),
    "triplet_margin_with_distance_loss": ("triplet_margin_with_distance_loss",
                                          [arr(4, 5), arr(4, 5), arr(4, 5)], [],
                                          dict(margin=0.7, swap=True, reduction="sum")),
}


def _torch_kwargs(kwargs):
    return {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_matches_torch_values_and_gradients(case):
    name, floats, constants, kwargs = CASES[case]
    torch_inputs = [torch.tensor(x, requires_grad=True) for x in floats]
    torch_out = getattr(TF, name)(*torch_inputs, *[torch.tensor(c) for c in constants],
                                  **_torch_kwargs(kwargs))
    torch_out.sum().backward()

    def ours(*xs):
        return getattr(F, name)(*xs, *[jnp.asarray(c) for c in constants], **kwargs)

    out = ours(*[jnp.asarray(x) for x in floats])
    np.testing.assert_allclose(np.asarray(out), torch_out.detach().numpy(), rtol=1e-5, atol=1e-5)
    grads = jax.grad(lambda *xs: jnp.sum(ours(*xs)), argnums=tuple(range(len(floats))))(
        *[jnp.asarray(x) for x in floats])
    for g, t in zip(grads, torch_inputs):
        np.testing.assert_allclose(np.asarray(g), t.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_channel_dropouts_zero_whole_channels():
    x = jnp.ones((4, 8, 16))
    out = np.asarray(F.dropout1d(x, 0.5, key=jax.random.key(0)))
    per_channel = out.reshape(4, 8, 16)
    assert all(len(set(row.tolist())) == 1 for row in per_channel.reshape(32, 16))
    assert set(np.unique(out)) <= {0.0, 2.0}
    out3 = np.asarray(F.dropout3d(jnp.ones((2, 6, 3, 3, 3)), 0.5, key=jax.random.key(1)))
    assert all(len(set(c.ravel().tolist())) == 1 for c in out3.reshape(12, -1))


def test_inplace_names_return_results():
    x = jnp.asarray(arr(3, 4))
    np.testing.assert_array_equal(np.asarray(F.relu_(x)), np.asarray(F.relu(x)))
    np.testing.assert_array_equal(np.asarray(F.leaky_relu_(x, 0.2)), np.asarray(F.leaky_relu(x, 0.2)))
