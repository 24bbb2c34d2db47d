"""Test harness: a torch layer and its jaxdl twin, same weights, same inputs, same answers.

`check_twin(torch_module, jaxdl_module, inputs)` copies the torch state_dict
into the twin, runs both in train and eval mode, and compares

- every forward output (max abs error <= fwd_tol * max(1, max |torch output|)),
- the gradient of a fixed random projection of the outputs with respect to
  every floating input and every trainable parameter
  (max abs error <= grad_tol * max |torch gradient|, plus a tiny floor),
- every buffer after the call (BatchNorm running statistics, counters).

Deep networks in train mode (BatchNorm over a few 1x1 maps) amplify float32 rounding until
torch's own float32 result is 1e-4 away from its float64 one. For them `float64_drift=k`
compares against the torch twin run in float64 instead, allowing k times torch float32's own
error there (or the tolerance, whichever is larger): jaxdl must be about as exact as torch.

Outputs may be nested tuples/lists (RNNs return `(out, h)`); `None` leaves are
skipped. Integer inputs (indices, offsets) are passed through undifferentiated.
"""

import collections
import copy

import jax.numpy as jnp
import numpy as np
import torch

import jaxdl as dl


def rand(rng: np.random.Generator, *shape, scale: float = 1.0) -> np.ndarray:
    """float32 normal samples, the default test input."""
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def flatten(tree) -> list:
    """Leaves of nested tuples/lists, in order, skipping None."""
    if tree is None:
        return []
    if isinstance(tree, tuple | list):
        return [leaf for item in tree for leaf in flatten(item)]
    return [tree]


def _np(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _max_abs_error(actual, expected) -> float:
    return float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))


def assert_close(actual, expected, what: str, tol: float = 1e-5, floor: float = 1.0,
                 torch_float32=None, drift: float = 0.0):
    """max |actual - expected| <= tol * max(floor, max |expected|); shapes must match.

    With `torch_float32` (torch's float32 result, `expected` being its float64 one) the bound is
    the larger of that and `drift` times torch float32's own error."""
    actual, expected = _np(actual), _np(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if expected.size == 0:
        return
    scale = max(floor, float(np.max(np.abs(expected))))
    err = _max_abs_error(actual, expected)
    bound, says = tol * scale, f"{tol:g} * {scale:.3g}"
    if torch_float32 is not None:
        torch_err = _max_abs_error(_np(torch_float32), expected)
        if drift * torch_err > bound:
            bound, says = drift * torch_err, f"{drift:g} x torch float32's own error {torch_err:.3g}"
    assert err <= bound, f"{what}: max abs error {err:.3g} > {says}"


def _is_float(x) -> bool:
    return np.issubdtype(np.asarray(x).dtype, np.floating)


def run_torch(module, inputs, kwargs, cotangent_seed: int):
    """Forward + backward of sum(outputs * fixed random cotangents) in torch."""
    t_inputs = [
        torch.tensor(x, requires_grad=_is_float(x)) if isinstance(x, np.ndarray) else x
        for x in inputs
    ]
    out = module(*t_inputs, **kwargs)
    leaves = flatten(out)
    cot_rng = np.random.default_rng(cotangent_seed)
    cotangents = [rand(cot_rng, *leaf.shape) if leaf.is_floating_point() else None
                  for leaf in leaves]
    loss = sum((leaf * torch.tensor(c)).sum() for leaf, c in zip(leaves, cotangents)
               if c is not None and leaf.requires_grad)
    params = {n: p for n, p in module.named_parameters() if p.requires_grad}
    if isinstance(loss, torch.Tensor):
        loss.backward()
    input_grads = [
        (None if t.grad is None else t.grad.numpy()) if isinstance(t, torch.Tensor)
        and t.requires_grad else None
        for t in t_inputs
    ]
    param_grads = {n: None if p.grad is None else p.grad.numpy() for n, p in params.items()}
    return [_np(leaf) for leaf in leaves], cotangents, input_grads, param_grads


def run_jaxdl(module, inputs, kwargs, cotangents, jit: bool):
    """The same projection's value and gradients through dl.value_and_grad (optionally dl.jit)."""
    diff_positions = [i for i, x in enumerate(inputs) if isinstance(x, np.ndarray) and _is_float(x)]
    fixed = [jnp.asarray(x) if isinstance(x, np.ndarray) else x for x in inputs]

    def objective(m, *diff):
        call = list(fixed)
        for i, value in zip(diff_positions, diff):
            call[i] = value
        out = m(*call, **kwargs)
        leaves = flatten(out)
        loss = sum(jnp.sum(leaf * c) for leaf, c in zip(leaves, cotangents) if c is not None)
        return jnp.asarray(loss, jnp.float32), leaves

    argnums = tuple(range(1 + len(diff_positions)))
    step = dl.value_and_grad(objective, argnums=argnums, has_aux=True)
    if jit:
        step = dl.jit(step, donate=False)
    (_, leaves), grads = step(module, *[fixed[i] for i in diff_positions])
    input_grads = [None] * len(inputs)
    for i, g in zip(diff_positions, grads[1:]):
        input_grads[i] = g
    return leaves, input_grads, dict(grads[0])


def _torch_results(module, inputs, kwargs, seed: int, training: bool):
    """run_torch in the given mode, from zeroed gradients, plus the buffers after the call."""
    module.train(training)
    module.zero_grad(set_to_none=True)
    outs, cotangents, input_grads, param_grads = run_torch(module, inputs, kwargs, seed)
    return outs, cotangents, input_grads, param_grads, {n: _np(b) for n, b in module.named_buffers()}


def check_twin(torch_module, jax_module, inputs, *, kwargs=None, modes=("train", "eval"),
               fwd_tol: float = 1e-5, grad_tol: float = 1e-4, jit: bool = False,
               seed: int = 20240601, float64_drift: float | None = None):
    """Compare a torch module and its jaxdl twin on `inputs` (numpy arrays or plain values).

    `float64_drift`: see the module docstring. Returns the jaxdl outputs of the last mode, for
    extra checks by the caller.
    """
    kwargs = kwargs or {}
    leaves = None
    exact = copy.deepcopy(torch_module).double() if float64_drift is not None else None
    exact_inputs = [x.astype(np.float64) if isinstance(x, np.ndarray) and _is_float(x) else x
                    for x in inputs]
    for mode in modes:
        training = mode == "train"
        jax_module.load_state_dict(torch_module.state_dict())
        jax_module.train(training)
        t_out, cotangents, t_in_grads, t_param_grads, t_buffers = _torch_results(
            torch_module, inputs, kwargs, seed, training)
        leaves, j_in_grads, j_param_grads = run_jaxdl(jax_module, inputs, kwargs, cotangents, jit)
        if exact is None:
            e_out, e_in_grads, e_param_grads, e_buffers = t_out, t_in_grads, t_param_grads, t_buffers
        else:
            e_out, _, e_in_grads, e_param_grads, e_buffers = _torch_results(
                exact, exact_inputs, kwargs, seed, training)

        def check(actual, torch32, expected, what, tol, floor=1.0):
            assert_close(actual, expected, what, tol, floor,
                         None if exact is None else torch32, float64_drift or 0.0)

        assert len(leaves) == len(t_out), f"[{mode}] {len(leaves)} outputs, torch {len(t_out)}"
        for k, (a, t, e) in enumerate(zip(leaves, t_out, e_out)):
            check(a, t, e, f"[{mode}] output {k}", fwd_tol)
        for k, (a, t, e) in enumerate(zip(j_in_grads, t_in_grads, e_in_grads)):
            if e is not None:
                check(a, t, e, f"[{mode}] grad of input {k}", grad_tol, floor=1e-6)
        assert set(j_param_grads) == set(t_param_grads), (
            f"[{mode}] gradient keys {sorted(j_param_grads)} != torch {sorted(t_param_grads)}")
        for name, e in e_param_grads.items():
            zeros = np.zeros_like(_np(j_param_grads[name]))
            t = zeros if t_param_grads[name] is None else t_param_grads[name]
            check(j_param_grads[name], t, zeros if e is None else e, f"[{mode}] grad of {name}",
                  grad_tol, floor=1e-6)
        for name, value in jax_module.named_buffers():
            check(value, t_buffers[name], e_buffers[name], f"[{mode}] buffer {name} after the call",
                  fwd_tol)
    return leaves


def pair(name: str, *args, **kwargs):
    """(torch.nn.<name>(*args, **kwargs), jaxdl.nn.<name>(*args, **kwargs)), torch seeded 0."""
    torch.manual_seed(0)
    return getattr(torch.nn, name)(*args, **kwargs), getattr(dl.nn, name)(*args, **kwargs)


def check_forward(torch_module, jax_module, inputs, *, mode: str = "eval", tol: float = 1e-5):
    """Forward outputs and buffers after the call, without gradients (one compiled jaxdl call):
    the cheap check for large models whose gradients are checked elsewhere, and for train-mode
    BatchNorm whose bias gradients are zero up to rounding (a BatchNorm downstream removes any
    per-channel shift), so that check_twin would compare noise. Returns the jaxdl outputs."""
    training = mode == "train"
    jax_module.load_state_dict(torch_module.state_dict())
    torch_module.train(training)
    jax_module.train(training)
    with torch.no_grad():
        expected = flatten(torch_module(*[torch.tensor(x) if isinstance(x, np.ndarray) else x
                                          for x in inputs]))
    call = dl.jit(lambda m, *xs: m(*xs), donate=False)
    leaves = flatten(call(jax_module, *[jnp.asarray(x) if isinstance(x, np.ndarray) else x
                                        for x in inputs]))
    assert len(leaves) == len(expected), f"[{mode}] {len(leaves)} outputs, torch {len(expected)}"
    for k, (a, e) in enumerate(zip(leaves, expected)):
        assert_close(a, e, f"[{mode}] output {k}", tol)
    t_buffers = dict(torch_module.named_buffers())
    for name, value in jax_module.named_buffers():
        assert_close(value, t_buffers[name], f"[{mode}] buffer {name} after the call", tol)
    return leaves


def count_parameters(module) -> int:
    """Number of parameter entries of a jaxdl or torch module."""
    return sum(int(np.prod(p.shape)) for _, p in module.named_parameters())


def registry_twin_pair(name, **kwargs):
    """(torch twin seeded 0, weightless jaxdl model) of a `jaxdl.models` registry entry;
    check_twin copies the twin's weights into the model."""
    from jaxdl import models

    torch.manual_seed(0)
    twin = models.model_entry(name).torch_twin(**kwargs)
    model = dl.memory.abstract_model(models.get_model, name, **kwargs)
    assert list(model.state_dict()) == list(twin.state_dict())
    return twin, model


def torch_cnn():
    """A small torch CNN (conv, BatchNorm, pooling, dropout, MLP head), seeded 0."""
    torch.manual_seed(0)
    return torch.nn.Sequential(collections.OrderedDict([
        ("conv", torch.nn.Conv2d(3, 6, 3, stride=2, padding=1, bias=False)),
        ("bn", torch.nn.BatchNorm2d(6)),
        ("act", torch.nn.LeakyReLU(0.2)),
        ("pool", torch.nn.MaxPool2d(2, ceil_mode=True)),
        ("drop", torch.nn.Dropout(0.3)),
        ("flat", torch.nn.Flatten()),
        ("head", torch.nn.Sequential(torch.nn.Linear(6 * 2 * 2, 16),
                                     torch.nn.GELU(approximate="tanh"),
                                     torch.nn.LayerNorm(16), torch.nn.Linear(16, 5))),
    ]))


def square_loss(out):
    return (out ** 2).sum()  # works on torch and jax arrays alike


def bool_mask(rng, *shape, keep_one_axis=-1):
    """Random bool mask with at least one False (attend) entry along `keep_one_axis`."""
    mask = rng.random(shape) < 0.4
    first = [slice(None)] * len(shape)
    first[keep_one_axis] = 0
    mask[tuple(first)] = False
    return mask
