"""Models with shapes but no weights, for planning networks too big (or slow) to build here."""

import jax

from jaxdl import _random
from jaxdl._store import RNG


def abstract_model(build, *args, **kwargs):
    """`build(*args, **kwargs)` traced, not run: a model whose weights are `jax.ShapeDtypeStruct`s.

    Weight initialisation is skipped (VGG-16's 138M parameters take seconds to draw
    on a CPU, and eager initialisation compiles one program per weight shape), so
    the model can go to `report`, `plan` and `offload(..., "dyn")` as it is, or run
    after `load_state_dict` fills every weight. Key streams (dropout) get real keys
    from the global stream, whose position advances as a real build would.

    Returns:
        The model, its parameters and buffers replaced by `jax.ShapeDtypeStruct`s.
    """
    if _random._base_key is None:  # seed outside the trace, or the global key would be a tracer
        _random.manual_seed(0)
    built = []

    def values():
        built.append(build(*args, **kwargs))
        return built[0]._store.values

    shapes = jax.eval_shape(values)
    store = built[0]._store
    store.values = [_random.next_key() if kind == RNG else shape
                    for shape, kind in zip(shapes, store.kinds)]
    return built[0]
