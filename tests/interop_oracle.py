"""Checks of a model converted by `dl.interop.from_torch` against its torch original.

Outputs may be a tensor or a dataclass of tensors (joined into one flat vector).
"""

import copy
import dataclasses

import jax.numpy as jnp
import numpy as np
import torch
import torch.nn.functional as F
from torch_twin import assert_close, rand

import jaxdl as dl


def joined(out):
    """A model's output as one array: a dataclass's fields flattened and concatenated."""
    if not dataclasses.is_dataclass(out):
        return out
    fields = [getattr(out, f.name) for f in dataclasses.fields(out)]
    if isinstance(fields[0], torch.Tensor):
        return torch.cat([f.flatten() for f in fields])
    return jnp.concatenate([f.reshape(-1) for f in fields])


def _torch_run(torch_model, inputs, rng, dtype, cotangent=None):
    """Output and parameter gradients of sum(output * cotangent) in torch at `dtype`."""
    args = [torch.as_tensor(x).to(dtype) if x.dtype.kind == "f" else torch.as_tensor(x)
            for x in inputs]
    out = joined(torch_model(*args))
    cotangent = rand(rng, *out.shape) if cotangent is None else cotangent
    (out * torch.as_tensor(cotangent).to(dtype)).sum().backward()
    grads = {n: p.grad.double().numpy() for n, p in torch_model.named_parameters()}
    return out.detach().numpy(), grads, cotangent


def check_against_torch(torch_model, model, inputs, rng):
    """Outputs within 1e-5 and every parameter gradient within 1e-4 relative, in train and
    eval mode, and the buffers (BatchNorm statistics) after the call.

    A gradient is judged against torch in float64: within 1e-4 of its largest entry, plus
    twice torch's own float32 error, plus 1e-6 of the largest gradient in the model. The
    last two matter only for gradients that are zero in exact arithmetic, i.e. float32
    rounding noise on both sides: a conv bias or a BatchNorm scale followed by a training-
    mode BatchNorm (shift and scale invariance), where torch's own float32 gradient is
    1e-3 relative off its float64 one.
    """

    @dl.jit
    def run(model, cotangent, *xs):
        def objective(m):
            out = joined(m(*xs))
            return jnp.sum(out * cotangent), out
        return dl.value_and_grad(objective, has_aux=True)(model)

    for training in (True, False):
        mode = "train" if training else "eval"
        torch_model.train(training).zero_grad(set_to_none=True)
        model.train(training)
        model.load_state_dict(torch_model.state_dict())
        reference = copy.deepcopy(torch_model).double()
        expected, grads32, cotangent = _torch_run(torch_model, inputs, rng, torch.float32)
        _, grads64, _ = _torch_run(reference, inputs, rng, torch.float64, cotangent)
        (_, out), grads = run(model, jnp.asarray(cotangent), *[jnp.asarray(x) for x in inputs])
        assert_close(out, expected, f"[{mode}] output", 1e-5)
        largest = max(np.max(np.abs(g)) for g in grads64.values())
        for name, g64 in grads64.items():
            own = np.max(np.abs(np.asarray(grads[name]) - g64))
            torch_error = np.max(np.abs(grads32[name] - g64))
            bound = 1e-4 * np.max(np.abs(g64)) + 2 * torch_error + 1e-6 * largest
            assert own <= bound, f"[{mode}] grad of {name}: error {own:.3g} > {bound:.3g}"
        for name, value in torch_model.named_buffers():
            assert_close(model.state_dict()[name], value, f"[{mode}] buffer {name}", 1e-5)


def train_in_step(torch_model, model, inputs, make_inputs, rng, steps=20, lr=0.05):
    """SGD with momentum on the same batches; losses and final weights must agree.

    Judged against torch trained in float64 on the same batches: within 1e-4, or three times
    torch float32's own distance from it where that is larger. Twenty steps of a small
    train-mode BatchNorm (batch 2) amplify rounding: on one CPU torch's float32 stem weight
    ended 1.3e-4 from jaxdl's, both about as far from float64's."""
    torch_model.train()
    model.train()
    with torch.no_grad():
        target_shape = joined(torch_model(*[torch.as_tensor(x) for x in inputs])).shape
    model.load_state_dict(torch_model.state_dict())  # that call moved BatchNorm statistics
    exact = copy.deepcopy(torch_model).double()
    t_opt = torch.optim.SGD(torch_model.parameters(), lr=lr, momentum=0.9)
    e_opt = torch.optim.SGD(exact.parameters(), lr=lr, momentum=0.9)
    opt = dl.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    @dl.jit
    def step(model, opt, batch, target):
        loss, grads = dl.value_and_grad(lambda m: jnp.mean((joined(m(*batch)) - target) ** 2))(model)
        opt.step(grads)
        return loss

    def torch_step(module, optimizer, batch, target, dtype):
        optimizer.zero_grad()
        args = [torch.as_tensor(x).to(dtype) if x.dtype.kind == "f" else torch.as_tensor(x)
                for x in batch]
        loss = F.mse_loss(joined(module(*args)), torch.as_tensor(target).to(dtype))
        loss.backward()
        optimizer.step()
        return loss.detach()

    for i in range(steps):
        batch = make_inputs(rng)
        target = rand(rng, *target_shape)
        t_loss = torch_step(torch_model, t_opt, batch, target, torch.float32)
        e_loss = torch_step(exact, e_opt, batch, target, torch.float64)
        loss = step(model, opt, tuple(jnp.asarray(x) for x in batch), jnp.asarray(target))
        assert_close(loss, e_loss, f"loss at step {i}", 1e-4, torch_float32=t_loss, drift=3.0)
    final = exact.state_dict()
    for name, value in torch_model.state_dict().items():
        assert_close(model.state_dict()[name], final[name], f"{name} after {steps} steps", 1e-4,
                     torch_float32=value, drift=3.0)
