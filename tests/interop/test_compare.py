"""dl.interop.compare: names the diverging layer, forward or gradient, and leaves the models as they were."""

import jax.numpy as jnp
import torch
from torch_twin import rand, square_loss, torch_cnn

import jaxdl as dl

tnn = torch.nn


def test_compare_names_exactly_the_perturbed_layer(rng):
    t = torch_cnn().eval()
    j = dl.interop.from_torch(t)
    j.head[0].weight = j.head[0].weight.at[3, 1].add(0.05)  # a deliberately broken port
    # eager jaxdl side (jit=False), as when stepping through a forward in a debugger
    report = dl.interop.compare(t, j, rand(rng, 2, 3, 7, 7), loss_fn=square_loss, jit=False)
    assert not report.ok
    assert report.first_divergence.path == "head.0"
    assert report.first_divergence.kind == "output"
    bad = {row.path for row in report.rows if not row.ok and row.kind == "output"}
    assert bad == {"head.0", "head.1", "head.2", "head.3", "head", "<root>"}
    text = str(report)
    assert "first divergence: head.0 (output)" in text and "DIFF" in text
    data = report.to_dict()
    assert data["ok"] is False and data["first_divergence"]["path"] == "head.0"
    assert len(data["rows"]) == len(report.rows)


def test_compare_gradient_only_divergence(rng):
    # same forward, different backward: a frozen parameter on one side only
    t = torch_cnn().eval()
    j = dl.interop.from_torch(t)
    t.head[3].bias.requires_grad_(False)
    report = dl.interop.compare(t, j, rand(rng, 2, 3, 7, 7), loss_fn=square_loss)
    assert report.ok  # a gradient torch does not have is not compared...
    j.head[3].requires_grad_(False)
    t.head[3].bias.requires_grad_(True)
    report = dl.interop.compare(t, j, rand(rng, 2, 3, 7, 7), loss_fn=square_loss)
    assert not report.ok  # ...but one jaxdl lacks is a divergence
    assert report.first_divergence.path == "head.3.weight"
    assert report.first_divergence.kind == "grad"


def test_compare_restores_the_models(rng):
    t = torch_cnn().eval()
    j = dl.interop.from_torch(t)
    dl.interop.compare(t, j, rand(rng, 2, 3, 7, 7), loss_fn=square_loss)
    assert all("forward" not in m.__dict__ for m in j.modules())
    assert all(not m._forward_hooks for m in t.modules())
    out = j(jnp.asarray(rand(rng, 2, 3, 7, 7)))  # still callable, nothing recorded
    assert out.shape == (2, 5)


def test_loss_pair_and_multiple_inputs(rng):
    torch.manual_seed(0)
    t = tnn.Bilinear(3, 4, 2)
    j = dl.interop.from_torch(t)
    report = dl.interop.compare(t, j, (rand(rng, 5, 3), rand(rng, 5, 4)),
                                loss_fn=(lambda o: o.sum(), lambda o: jnp.sum(o)))
    assert report.ok and len(report.rows) == 3
