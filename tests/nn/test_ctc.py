"""F.ctc_loss and nn.CTCLoss against PyTorch: losses and gradients w.r.t. the logits fed through
log_softmax (PyTorch's own backward assumes normalised log_probs; see jaxdl/nn/_ctc.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from functional_oracle import check_functional
from torch_twin import rand

import jaxdl.nn.functional as F
from jaxdl import nn


def _ours(logits, *rest, **kwargs):
    return F.ctc_loss(jax.nn.log_softmax(logits, axis=-1), *rest, **kwargs)


def _theirs(logits, *rest, **kwargs):
    return TF.ctc_loss(logits.log_softmax(-1), *rest, **kwargs)


def _problem(seed, steps, batch, classes, width, blank=0, repeats=False):
    """logits (T, N, C), padded targets without the blank, input and target lengths."""
    rng = np.random.default_rng(seed)
    labels = [c for c in range(classes) if c != blank]
    targets = rng.choice(labels, (batch, width))
    if repeats:  # repeated labels need a blank between them: no skip transition
        targets[:, 1::2] = targets[:, ::2][:, :targets[:, 1::2].shape[1]]
    input_lengths = rng.integers(max(2 * width + 1, 1), steps + 1, batch)
    input_lengths[0] = steps
    target_lengths = rng.integers(0, width + 1, batch)
    target_lengths[-1] = width
    return rand(rng, steps, batch, classes), targets, input_lengths, target_lengths


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("blank, repeats", [(0, False), (4, True)])
def test_padded_targets_match_torch(reduction, blank, repeats):
    logits, targets, lengths_in, lengths_out = _problem(0, 11, 4, 5, 3, blank, repeats)
    check_functional(_ours, _theirs, [logits], [targets, lengths_in, lengths_out],
                     dict(blank=blank, reduction=reduction))


def test_concatenated_targets_and_batch_one_match_torch():
    logits, targets, lengths_in, lengths_out = _problem(1, 9, 3, 6, 3)
    flat = np.concatenate([t[:n] for t, n in zip(targets, lengths_out)])
    check_functional(_ours, _theirs, [logits], [flat, lengths_in, lengths_out])
    logits, targets, lengths_in, lengths_out = _problem(2, 6, 1, 3, 2)
    check_functional(_ours, _theirs, [logits], [targets, lengths_in, lengths_out],
                     dict(reduction="sum"))


def test_unbatched_and_empty_targets_match_torch():
    logits, targets, _, _ = _problem(3, 7, 1, 4, 2)
    check_functional(_ours, _theirs, [logits[:, 0]], [targets[0], np.array(6), np.array(2)],
                     dict(reduction="none"))
    check_functional(_ours, _theirs, [logits], [np.zeros((1, 0), np.int64), np.array([7]),
                                                np.array([0])])


def test_impossible_alignments_and_zero_infinity():
    rng = np.random.default_rng(4)
    logits = rand(rng, 3, 2, 4)
    targets = np.array([[1, 1, 2], [1, 2, 3]])  # sample 0 needs 4 frames, has 3
    lengths = (np.array([3, 3]), np.array([3, 3]))
    check_functional(_ours, _theirs, [logits], [targets, *lengths],
                     dict(reduction="sum", zero_infinity=True))
    loss = F.ctc_loss(jax.nn.log_softmax(logits, -1), targets, *lengths, reduction="none")
    assert np.isinf(loss[0]) and np.isfinite(loss[1])


def test_gradient_wrt_log_probs_differs_from_torch_by_exp_log_probs():
    """The documented convention: torch's gradient = ours + exp(log_probs) within each input."""
    logits, targets, lengths_in, lengths_out = _problem(5, 8, 3, 5, 2)
    log_probs = torch.tensor(logits).log_softmax(-1).requires_grad_()
    TF.ctc_loss(log_probs, torch.tensor(targets), torch.tensor(lengths_in),
                torch.tensor(lengths_out), reduction="sum").backward()
    ours = jax.grad(lambda lp: F.ctc_loss(lp, targets, lengths_in, lengths_out, reduction="sum"))(
        jnp.asarray(log_probs.detach().numpy()))
    inside = (np.arange(8)[:, None] < lengths_in[None, :])[..., None]
    np.testing.assert_allclose(np.asarray(ours) + np.exp(log_probs.detach().numpy()) * inside,
                               log_probs.grad.numpy(), atol=1e-5)


def test_module_matches_torch_and_runs_under_jit_with_traced_lengths():
    logits, targets, lengths_in, lengths_out = _problem(6, 10, 3, 5, 3)
    flat = np.concatenate([t[:n] for t, n in zip(targets, lengths_out)])
    for kwargs in (dict(), dict(blank=0, reduction="sum", zero_infinity=True)):
        ours, theirs = nn.CTCLoss(**kwargs), torch.nn.CTCLoss(**kwargs)
        check_functional(lambda x, *r, m=ours: m(jax.nn.log_softmax(x, -1), *r),
                         lambda x, *r, m=theirs: m(x.log_softmax(-1), *r), [logits],
                         [flat, lengths_in, lengths_out])
    expected = TF.ctc_loss(torch.tensor(logits).log_softmax(-1), torch.tensor(flat),
                           torch.tensor(lengths_in), torch.tensor(lengths_out))
    jitted = jax.jit(lambda x, il, tl: nn.CTCLoss()(jax.nn.log_softmax(x, -1), flat, il, tl))
    np.testing.assert_allclose(jitted(logits, lengths_in, lengths_out), expected.numpy(), rtol=1e-5)


def test_bad_input():
    lp = np.zeros((5, 2, 4), np.float32)
    with pytest.raises(ValueError, match=r"expected input_lengths of shape \(2,\), got \(3,\)"):
        F.ctc_loss(lp, np.ones((2, 2), np.int32), [5, 5, 5], [2, 2])
    with pytest.raises(ValueError, match=r"input_lengths must lie in \[0, 5\]"):
        F.ctc_loss(lp, np.ones((2, 2), np.int32), [6, 5], [2, 2])
    with pytest.raises(ValueError, match="concatenated targets have 3 labels but target_lengths sum to 4"):
        F.ctc_loss(lp, np.ones(3, np.int32), [5, 5], [2, 2])
    with pytest.raises(ValueError, match=r"blank=4 must be a class index in \[0, 4\)"):
        F.ctc_loss(lp, np.ones((2, 2), np.int32), [5, 5], [2, 2], blank=4)
    with pytest.raises(nn.ShapeError, match=r"CTCLoss\): expected input of rank 2-d or 3-d"):
        nn.CTCLoss()(lp[None], np.ones((2, 2), np.int32), [5, 5], [2, 2])
