"""`offload(model, policy)`: install a vDNN policy, planning first for "dyn".

Apart from `_policies.py` so that the policies do not import the planner
(which imports the policies).
"""

from jaxdl._module import Module
from jaxdl.memory._planner import plan as make_plan
from jaxdl.memory._policies import OffloadState, check_policy, host_memory_kind, install


def offload(model: Module, policy: str = "all", *, budget_bytes: int | None = None,
            example_inputs=None, **planner_options) -> Module:
    """Make `model`'s forward follow a vDNN memory policy, wherever it is called.

    Arguments:
        model: the root module; it is returned itself, with unchanged
            parameters and state_dict.
        policy: "none" (plain autodiff), "all" (vDNN_all: every layer's input
            offloaded to pinned host memory in forward, fetched back for
            backward), "conv" (vDNN_conv: conv inputs offloaded, other layer
            inputs kept on the device), "remat" (recompute everything from the
            model's inputs), or "dyn" (the planner picks the cheapest of
            none/conv/all/remat whose planned peak fits `budget_bytes`).
        budget_bytes, example_inputs, planner_options (loss_fn, host_bandwidth,
            flops_per_second): for "dyn" only, see `dl.memory.plan`.

    Returns:
        `model`. With "dyn", `dl.memory.plan_of(model)` tells what was chosen and why.
    """
    check_policy(policy)
    if not isinstance(model, Module):
        raise TypeError(f"dl.memory.offload expects an nn.Module, got {type(model).__name__}")
    plan = None
    if policy == "dyn":
        if budget_bytes is None or example_inputs is None:
            raise ValueError(
                "dl.memory.offload(model, 'dyn') needs budget_bytes= and example_inputs= "
                "(arrays or jax.ShapeDtypeStruct) to plan with"
            )
        plan = make_plan(model, example_inputs, budget_bytes=budget_bytes, **planner_options)
        configuration = plan.configuration
    else:
        configuration = policy
    state = OffloadState(policy, configuration, plan, host_memory_kind())
    install(model, configuration, state)
    return model
