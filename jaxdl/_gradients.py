"""`Gradients`: the dict `dl.grad` returns for a module argument.

A plain dict keyed like `named_parameters()`, that also remembers the store
and slot of each entry, so `opt.step(grads)` can route every gradient to its
parameter without matching names, and refuse gradients of another model. It is
a JAX pytree: `jax.tree.map` over it (clipping, scaling, averaging) returns a
`Gradients` that keeps the store and slots.
"""

import jax


@jax.tree_util.register_pytree_with_keys_class
class Gradients(dict):
    def __init__(self, values: dict, slots: dict[str, int], store):
        super().__init__(values)
        self.slots = slots
        self.store = store  # the `Store` of the parameters these are gradients of

    def tree_flatten_with_keys(self):
        keys = tuple(self)
        children = [(jax.tree_util.DictKey(k), self[k]) for k in keys]
        return children, (keys, tuple(self.slots[k] for k in keys), self.store)

    @classmethod
    def tree_unflatten(cls, aux, children):
        keys, slots, store = aux
        return cls(dict(zip(keys, children)), dict(zip(keys, slots)), store)

    def __repr__(self):
        return f"Gradients({dict.__repr__(self)})"
