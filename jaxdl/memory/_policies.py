"""vDNN policies: tag every layer's input with its path, run the model under a checkpoint policy.

`offload(model, policy)` (in `_offload.py`) installs two kinds of per-instance call hooks (see
`Module.__call__`):
- on every layer (a module without children): its first input is tagged with
  `checkpoint_name(x, layer path)`; every module's forward runs in
  `jax.named_scope(path)`, so residuals can be attributed to layers;
- on the root: its forward runs under `dl.checkpoint(..., policy=...)`, whose
  `jax.checkpoint_policies` policy is built from those names.

Within a `jax.checkpoint` region a value that the policy neither saves nor
offloads is recomputed in the backward pass. So "conv" (vDNN_conv: offload conv
inputs, keep the rest on the device) names the other layers' inputs as saved.
"""

import dataclasses

import jax
from jax.ad_checkpoint import checkpoint_name

from jaxdl._module import Module
from jaxdl._transforms import checkpoint
from jaxdl.nn._conv import _ConvNd

POLICIES = ("none", "all", "conv", "remat", "dyn")
# Configurations the "dyn" planner chooses from, least to most aggressive.
CONFIGURATIONS = ("none", "conv", "all", "remat")


def check_policy(policy) -> str:
    if policy not in POLICIES:
        raise ValueError(
            f"dl.memory.offload: unknown policy {policy!r}; valid policies: "
            + ", ".join(repr(p) for p in POLICIES)
        )
    return policy


def host_memory_kind() -> str | None:
    """'pinned_host' when the default device can address it, else None (offload stays on device).

    jax 0.10 CPU devices list PINNED_HOST memory and run the offloading
    `device_put`s; on a backend without it, offloaded names are saved on the device
    instead (the gradients are the same, only the memory placement differs).
    """
    kinds = {m.kind for m in jax.devices()[0].addressable_memories()}
    return "pinned_host" if "pinned_host" in kinds else None


def layer_name(module: Module) -> str:
    return module._path or type(module).__name__


def _is_layer(module: Module) -> bool:
    return not any(True for _ in module.children())


def layer_names(model: Module) -> dict[str, bool]:
    """{layer path: is a convolution} for the layers (modules without children) of `model`."""
    return {
        layer_name(m): isinstance(m, _ConvNd) for m in model.modules() if _is_layer(m)
    }


def jax_policy(policy: str, names: dict[str, bool], host: str | None = "pinned_host"):
    """The `jax.checkpoint` policy for `policy` over layer `names` ({path: is conv})."""
    if policy == "remat":
        offloaded, saved = [], []
    elif policy == "all":
        offloaded, saved = list(names), []
    elif policy == "conv":
        offloaded = [n for n, conv in names.items() if conv]
        saved = [n for n, conv in names.items() if not conv]
    else:
        raise ValueError(f"no checkpoint policy for {policy!r}")
    if host is None:  # no host memory space: keep what would be offloaded on the device
        saved, offloaded = saved + offloaded, []
    return jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=saved,
        names_which_can_be_offloaded=offloaded,
        offload_src="device",
        offload_dst=host or "pinned_host",
    )


# Inputs already tagged during the current root forward, {id: (input, tagged)}, so an
# input shared by several layers (an inception block's branches) is offloaded once.
_tagged: list[dict] = []


def _tag(x, name):
    if not isinstance(x, jax.Array | jax.core.Tracer):
        return x
    if not _tagged:
        return checkpoint_name(x, name)
    seen = _tagged[-1].get(id(x))
    if seen is None or seen[0] is not x:
        seen = (x, checkpoint_name(x, name))
        _tagged[-1][id(x)] = seen
    return seen[1]


def _layer_call(module, args, kwargs):
    """Call hook of a layer: tag its input feature map, trace it in a named scope."""
    name = layer_name(module)
    if args:
        args = (_tag(args[0], name), *args[1:])
    with jax.named_scope(name):
        return module.forward(*args, **kwargs)


def _scoped_call(module, args, kwargs):
    """Call hook of a container: its own ops (e.g. a functional ReLU) traced in its scope."""
    with jax.named_scope(layer_name(module)):
        return module.forward(*args, **kwargs)


def _hook_for(module):
    return _layer_call if _is_layer(module) else _scoped_call


@dataclasses.dataclass
class OffloadState:
    """What `offload` left on the root module: the policy, the planner's choice, a cache."""

    policy: str  # as requested: may be "dyn"
    configuration: str  # what runs: one of CONFIGURATIONS
    plan: object = None  # the "dyn" planner's Plan
    host: str | None = "pinned_host"
    _cached: tuple = (None, None)  # (store version, jax policy)

    def jax_policy(self, model):
        version = model._store.version
        if self._cached[0] != version:
            self._cached = (version, jax_policy(self.configuration, layer_names(model), self.host))
        return self._cached[1]


def _root_call(module, args, kwargs):
    """Call hook of the root: its forward under `dl.checkpoint` with the policy's names."""
    state = module._memory
    inner = _hook_for(module)

    def run(model, *inputs):
        _tagged.append({})
        try:
            return inner(model, inputs, kwargs)
        finally:
            _tagged.pop()

    return checkpoint(run, policy=state.jax_policy(module))(module, *args)


def install(model: Module, configuration: str, state: OffloadState | None):
    """Set (or with "none", clear) the call hooks over `model`'s tree."""
    for module in model.modules():
        if module is not model:
            module._set_call_hook(None if configuration == "none" else _hook_for(module))
    model._set_call_hook(None if configuration == "none" else _root_call, state)


def tagged(model: Module):
    """Context manager: layers tagged and scoped, no checkpoint (for attributing residuals)."""
    return _Tagging(model)


class _Tagging:
    def __init__(self, model):
        self.layers = [m for m in model.modules() if m.__dict__.get("_call_hook") is None]

    def __enter__(self):
        for m in self.layers:
            m._set_call_hook(_hook_for(m), m.__dict__.get("_memory"))

    def __exit__(self, *exc):
        for m in self.layers:
            m._set_call_hook(None, m.__dict__.get("_memory"))


def policy_of(model: Module) -> str:
    """The configuration `model`'s forward runs under: "none", "conv", "all" or "remat"."""
    state = model.__dict__.get("_memory")  # unset until a policy is installed
    return "none" if state is None else state.configuration


def plan_of(model: Module):
    """The "dyn" planner's `Plan` for `model` (None unless offloaded with "dyn")."""
    state = model.__dict__.get("_memory")
    return None if state is None else state.plan

