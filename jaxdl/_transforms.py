"""`dl.jit`, `dl.grad`, `dl.value_and_grad`, `dl.vmap`, `dl.checkpoint`.

Each transform turns a function of stateful objects (modules, optimizers, ...)
into a pure function of their stores' value lists: the lists go in as
arguments, the mutated lists come out as results, and the Python objects see
the results afterwards, as if the function had run eagerly.
"""

import collections
import functools

import jax

from jaxdl import _anomaly, _module, _store, _trace_state, _xla_options
from jaxdl._gradients import Gradients
from jaxdl._store import Stateful, UnthreadedStore, tracing_context


def _stores_of(objects) -> list:
    """Unique live stores of the stateful objects, in first-seen order."""
    return list(dict.fromkeys(obj._store for obj in objects if isinstance(obj, Stateful)))


def _swap_in(stores, values):
    """Point each store at new value lists; returns the previous lists."""
    previous = [store.values for store in stores]
    for store, vals in zip(stores, values):
        if len(vals) != len(store.values):
            raise RuntimeError("a store changed size inside a transform")
        store.values = list(vals)
    return previous


def _run_threaded(fn, stores, values, keyed: bool = False):
    """Run `fn()` with `stores` holding `values`; returns (output, values after).
    `keyed`: the trace is cached under the stores' versions (see `_store.observe`)."""
    with tracing_context(stores, keyed):
        previous = _swap_in(stores, values)
        try:
            out = fn()
            return out, [_constrain(store) for store in stores]
        finally:
            for store, vals in zip(stores, previous):
                store.values = vals


def _constrain(store) -> list:
    """The store's values, with slots placed by `fully_shard` kept on their sharding."""
    values = store.values
    if store.shardings:
        values = list(values)
        for index, sharding in store.shardings.items():
            values[index] = jax.lax.with_sharding_constraint(values[index], sharding)
    return values


# Enclosing data-parallel steps, innermost last, as (axis name, gradient reducer):
# gradients taken inside are averaged over the axis, as DistributedDataParallel
# does in backward.
_data_axes: list[tuple] = []


def data_axis() -> str | None:
    """Name of the data-parallel axis the current trace runs under, if any."""
    return _data_axes[-1][0] if _data_axes else None


def _retrying(call, stores: list):
    """Call `call(stores)`; when a trace reads an unthreaded store, add it and trace again."""
    while True:
        threaded = set(stores)
        try:
            return call(stores)
        except UnthreadedStore as err:
            if err.context != threaded:
                raise
            stores.append(err.store)


def _copy_arrays(values):
    return [jax.numpy.copy(v) for v in values]


_copy_jit = jax.jit(_copy_arrays)


def _unlend(store):
    """Before donating `store`: the arrays handed out to the user are replaced in the store
    by copies (one compiled call), so the user's keep their buffer and their value."""
    lent = sorted(store.lent)
    store.lent.clear()
    values = store.values
    copies = _copy_jit([values[i] for i in lent])
    for i, copy in zip(lent, copies):
        values[i] = copy


def _commit(stores, values):
    for store, vals in zip(stores, values):
        store.values = vals if isinstance(vals, list) else list(vals)


_STATIC_TYPES = (str, bool, type(None), type, functools.partial)


def _is_static(value) -> bool:
    if isinstance(value, tuple | frozenset):  # e.g. a tuple of names: static if nothing in it is numeric
        return all(_is_static(v) for v in value)
    return isinstance(value, _STATIC_TYPES) or callable(value) and not isinstance(value, jax.Array)


class jit:  # noqa: N801 - used like a function, as in PyTorch/JAX
    """Compile `fn`, whose arguments may be modules, optimizers, schedulers, scalers.

    Mutations inside (parameter updates, BatchNorm statistics, optimizer state,
    key streams) land on the Python objects after the call, as in eager PyTorch.

    Arguments:
        fn: the step function.
        donate: donate the old state arrays to the compiled step (saves memory;
            arrays read from a module before the call are invalid after it).
        static_argnames: arguments compiled as constants (recompiles per value).
            Strings, bools, None and callables are always static.

    Per call, Python work is a few dictionary lookups per argument: the whole
    state of a module tree is one list, handed over and swapped back in O(1).
    It recompiles only when a store's structure version, the stateful
    arguments' identity, a static argument, or the input shapes change.
    """

    _MAX_CACHE = 64

    def __init__(self, fn=None, donate: bool = True, static_argnames=()):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.donate = donate
        self.static_argnames = (
            (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        )
        self._cache = collections.OrderedDict()
        self._closure_stores: list = []  # stores discovered read through closures
        self.trace_count = 0

    def __new__(cls, fn=None, *args, **options):
        if fn is None:  # @dl.jit(donate=False) form
            return lambda f: cls(f, *args, **options)
        return super().__new__(cls)

    def __get__(self, instance, owner):
        return self if instance is None else functools.partial(self, instance)

    def __call__(self, *args, **kwargs):
        while True:
            stores = _stores_of((*args, *kwargs.values()))
            for store in self._closure_stores:
                store = store.live()
                if store not in stores:
                    stores.append(store)
            try:
                return self._call(stores, args, kwargs)
            except UnthreadedStore as err:
                if err.context != set(stores):
                    raise
                self._closure_stores.append(err.store)

    def _call(self, stores, args, kwargs):
        # the compiled step zips its arguments with this call's: the count is part of the key
        key, dynamic = [len(args)], []
        for position, value in enumerate(args):
            if isinstance(value, Stateful) or _is_static(value):
                key.append((position, id(value) if isinstance(value, Stateful) else value))
                dynamic.append(None)
            else:
                dynamic.append(value)
        dyn_kwargs = {}
        for name, value in kwargs.items():
            if isinstance(value, Stateful) or name in self.static_argnames or _is_static(value):
                key.append((name, id(value) if isinstance(value, Stateful) else value))
            else:
                dyn_kwargs[name] = value
        key.extend((id(store), store.version) for store in stores)
        key.append(_trace_state.key())
        key = tuple(key)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._compile(stores, args, kwargs, dynamic, dyn_kwargs)
            self._cache[key] = compiled
            if len(self._cache) > self._MAX_CACHE:
                self._cache.popitem(last=False)
        dynamic, dyn_kwargs = self._prepare(stores, dynamic, dyn_kwargs)
        if self.donate:
            for store in stores:
                if store.lent:
                    _unlend(store)
        out, values = compiled([store.values for store in stores], dynamic, dyn_kwargs)
        _commit(stores, values)
        return out

    def _prepare(self, stores, dynamic, dyn_kwargs):
        """Hook for subclasses to check or place the arguments of each call."""
        return dynamic, dyn_kwargs

    def _compile(self, stores, args, kwargs, dynamic, dyn_kwargs):
        fixed_args = [None if d is not None else a for a, d in zip(args, dynamic)]
        fixed_kwargs = {k: v for k, v in kwargs.items() if k not in dyn_kwargs}

        def pure(store_values, dyn_args, dyn_kw):
            call_args = [a if d is None else d for a, d in zip(fixed_args, dyn_args)]
            result = _run_threaded(
                lambda: self.fn(*call_args, **fixed_kwargs, **dyn_kw), stores, store_values, True
            )
            self.trace_count += 1  # complete traces only (one that found a new store restarts)
            return result

        step = self._wrap(pure, dynamic, dyn_kwargs)
        if not _anomaly.is_anomaly_enabled():
            return jax.jit(step, donate_argnums=(0,) if self.donate else (),
                           compiler_options=_xla_options.xla_compiler_options())
        # Checked, and not donated: a failing step raises before anything is committed.
        checked = jax.jit(_anomaly.checkified(step),
                          compiler_options=_xla_options.xla_compiler_options())

        def compiled(*step_args):
            error, result = checked(*step_args)
            _anomaly.raise_error(error)
            return result

        return compiled

    def _wrap(self, pure, dynamic, dyn_kwargs):
        """Hook for subclasses to map the pure step over devices before compiling."""
        return pure


def _grad_targets(args, argnums):
    """Differentiation targets: trainable-parameter dicts for modules, the array otherwise."""
    targets, slot_maps = [], []
    for i in argnums:
        arg = args[i]
        if isinstance(arg, _module.Module):
            slots = arg._trainable_slots()
            values = arg._store.values
            targets.append(
                Gradients({name: values[index] for name, index in slots.items()}, slots, arg._store)
            )
            slot_maps.append(slots)
        else:
            targets.append(arg)
            slot_maps.append(None)
    return targets, slot_maps


def value_and_grad(fn, argnums=0, has_aux: bool = False):
    """Like `jax.value_and_grad`; the gradient for a module argument is a dict
    keyed like its `named_parameters()` (trainable parameters only).

    Side effects of `fn` on non-parameter state (BatchNorm running statistics,
    key streams) persist, as in a PyTorch forward pass.
    """
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)

    def wrapped(*args, **kwargs):
        from jaxdl.nn import _pooled_linear  # here: jaxdl.nn imports this module

        def attempt(stores):
            targets, slot_maps = _grad_targets(args, nums)

            def inner(diff_values):
                call_args = list(args)

                def run():
                    for i, slots, value in zip(nums, slot_maps, diff_values):
                        if slots is None:
                            call_args[i] = value
                        else:
                            store = args[i]._store
                            for name, index in slots.items():
                                store.values[index] = value[name]
                    return fn(*call_args, **kwargs)

                out, after = _run_threaded(run, stores, [s.values for s in stores])
                value, aux = out if has_aux else (out, None)
                return value, (aux, after)

            kept = set()  # parameters the forward wrote on purpose (Module._update_parameter)
            _store.kept_writes.append(kept)
            try:
                differentiated = inner
                if _pooled_linear.worth_tracing([a for a in args if isinstance(a, _module.Module)]):
                    differentiated = _pooled_linear.reassociated(inner)
                (value, (aux, after)), grads = jax.value_and_grad(differentiated,
                                                                  has_aux=True)(targets)
            finally:
                _store.kept_writes.pop()
            if _anomaly.is_anomaly_enabled():
                _anomaly.finite_outputs(value, "the loss")
                for target in grads:
                    for name, g in (target.items() if isinstance(target, Gradients)
                                    else [("input", target)]):
                        _anomaly.finite_outputs(g, f"the gradient of '{name}'")
            if _data_axes:
                grads = jax.tree.map(_data_axes[-1][1], grads)
            # Keep mutations of buffers and key streams, but the parameters themselves
            # are unchanged by a forward pass (unless written on purpose): restore the
            # original arrays.
            for store, vals in zip(stores, after):
                originals = store.values
                for i, slots in enumerate(slot_maps):
                    if slots is not None and args[nums[i]]._store is store:
                        for index in slots.values():
                            if (store, index) not in kept:
                                vals[index] = originals[index]
                store.values = list(vals)
            return value, aux, grads

        value, aux, grads = _retrying(attempt, _stores_of((*args, *kwargs.values())))
        grads = grads[0] if single else tuple(grads)
        return ((value, aux), grads) if has_aux else (value, grads)

    return wrapped


def grad(fn, argnums=0, has_aux: bool = False):
    """Like `jax.grad`; see `value_and_grad` for module arguments."""
    vg = value_and_grad(fn, argnums, has_aux)

    def wrapped(*args, **kwargs):
        if has_aux:
            (_, aux), grads = vg(*args, **kwargs)
            return grads, aux
        return vg(*args, **kwargs)[1]

    return wrapped


def _threaded_transform(fn, transform, describe_failure=None):
    """Apply a JAX transform to `fn` with module state threaded as explicit inputs/outputs."""

    def wrapped(*args, **kwargs):
        def attempt(stores):
            dyn_args = [None if isinstance(a, Stateful) else a for a in args]

            def pure(store_values, dyn):
                call_args = [a if d is None else d for a, d in zip(args, dyn)]
                return _run_threaded(lambda: fn(*call_args, **kwargs), stores, store_values)

            out, values = transform(pure)([s.values for s in stores], dyn_args)
            _commit(stores, values)
            return out

        try:
            return _retrying(attempt, _stores_of((*args, *kwargs.values())))
        except ValueError as err:
            if describe_failure is None:
                raise
            raise describe_failure(err) from err

    return wrapped


def checkpoint(fn, policy=None, prevent_cse: bool = True):
    """Rematerialise `fn` in the backward pass (`jax.checkpoint`), modules allowed as arguments.

    `policy` is a `jax.checkpoint_policies` policy (e.g. save or offload by name).
    """
    return _threaded_transform(
        fn, lambda pure: jax.checkpoint(pure, policy=policy, prevent_cse=prevent_cse)
    )


def vmap(fn, in_axes=0, out_axes=0):
    """Like `jax.vmap`; module arguments are shared across the batch (axis None).

    State written inside (BatchNorm in training mode, dropout keys) cannot be
    batched: put the module in eval mode or vmap a function without it.
    """
    def transform(pure):
        def batched(store_values, dyn):
            axes = in_axes if isinstance(in_axes, list | tuple) else [in_axes] * len(dyn)
            axes = [None if d is None else a for a, d in zip(axes, dyn)]
            return jax.vmap(pure, in_axes=(None, axes), out_axes=(out_axes, None))(
                store_values, dyn
            )

        return batched

    def describe(err):
        return ValueError(
            f"dl.vmap: {err}. Module state written inside dl.vmap would differ per example; "
            "call model.eval() or keep stateful layers outside the vmapped function."
        )

    return _threaded_transform(fn, transform, describe)
