"""`data_parallel`: a compiled step split over the data axis of a device mesh.

The step function is the one a single device would run. Under `data_parallel`
its batch arguments are split along their first axis, every module and
optimizer is replicated, `dl.grad` averages gradients over the data axis
(`lax.pmean`, as DistributedDataParallel does in backward), and what comes out
is the same on every device: scalar outputs (the loss) are averaged, other
arrays are gathered back into the global batch, buffers updated from local
batches (BatchNorm statistics) are averaged. With equal shards this is exactly
single-device training on the global batch.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxdl import _transforms
from jaxdl._jax_compat import gather_replicated, host_local_to_global, varying_axes
from jaxdl._store import RNG

DATA_AXIS = "data"


def default_mesh() -> Mesh:
    """All devices of all processes on one "data" axis."""
    return Mesh(np.array(jax.devices()), (DATA_AXIS,))


def _varying(x, axis) -> bool | None:
    """Whether `x` differs across `axis` (None under pmap, which does not track it)."""
    varying = varying_axes(x)
    return None if varying is None or not _tracked[-1] else axis in varying


# shard_map types each value as varying or replicated over the axis; pmap does not,
# so there every result is reduced (a no-op up to rounding for replicated values).
_tracked = [True]


def _agree(x, axis):
    """Make a value computed per shard identical on every shard."""
    if _varying(x, axis) is False:
        return x
    return jax.lax.pmean(x, axis) if jnp.issubdtype(x.dtype, jnp.inexact) else jax.lax.pmax(x, axis)


def _mean_gradient(g, axis):
    """Average a gradient over the data axis.

    shard_map's autodiff already sums the gradient of a replicated parameter
    over the axis (the transpose of broadcasting it to every shard), so that
    sum only needs dividing; pmap does not track this, so there we pmean.
    """
    if _varying(g, axis) is False:
        return g / jax.lax.psum(1, axis)
    return jax.lax.pmean(g, axis)


def _output(x, axis):
    """Per-shard step outputs: scalars averaged, batched arrays gathered."""
    if x.ndim == 0:
        return _agree(x, axis)
    return x if _varying(x, axis) is False else gather_replicated(x, axis)


class DataParallel(_transforms.jit):
    """What `data_parallel` returns: a `dl.jit` whose pure step is mapped over the mesh."""

    def __init__(self, fn, mesh=None, batch_argnums=None, mode="shard_map", donate=True,
                 static_argnames=()):
        if mode not in ("shard_map", "pmap"):
            raise ValueError(f"mode must be 'shard_map' or 'pmap', got {mode!r}")
        super().__init__(fn, donate=donate, static_argnames=static_argnames)
        self.mesh = default_mesh() if mesh is None else mesh
        if DATA_AXIS not in self.mesh.axis_names:
            raise ValueError(f"the mesh needs a '{DATA_AXIS}' axis, got axes {self.mesh.axis_names}")
        self.shards = self.mesh.shape[DATA_AXIS]
        self.batch_argnums = None if batch_argnums is None else set(
            (batch_argnums,) if isinstance(batch_argnums, int) else batch_argnums
        )
        self.mode = mode

    def _is_batch(self, position, value) -> bool:
        if self.batch_argnums is not None:
            return position in self.batch_argnums
        leaves = jax.tree.leaves(value)
        return bool(leaves) and all(np.ndim(leaf) >= 1 for leaf in leaves)

    def _specs(self, dynamic, dyn_kwargs):
        args = [P(DATA_AXIS) if d is not None and self._is_batch(i, d) else P()
                for i, d in enumerate(dynamic)]
        kwargs = {k: P(DATA_AXIS) if self._is_batch(k, v) else P() for k, v in dyn_kwargs.items()}
        return args, kwargs

    def _prepare(self, stores, dynamic, dyn_kwargs):
        arg_specs, kw_specs = self._specs(dynamic, dyn_kwargs)
        multiprocess = jax.process_count() > 1
        for where, value, spec in [*zip(range(len(dynamic)), dynamic, arg_specs),
                                   *((k, dyn_kwargs[k], kw_specs[k]) for k in dyn_kwargs)]:
            if spec == P() or value is None:
                continue
            for leaf in jax.tree.leaves(value):
                rows = np.shape(leaf)[0] * (jax.process_count() if multiprocess else 1)
                if rows % self.shards:
                    raise ValueError(
                        f"data_parallel: argument {where!r} has a global batch of {rows}, not divisible "
                        f"by the {self.shards} data shards of the mesh; use a batch size that is a "
                        f"multiple of {self.shards} (e.g. DataLoader(drop_last=True))"
                    )
        if multiprocess:
            dynamic = [self._global(d, s) for d, s in zip(dynamic, arg_specs)]
            dyn_kwargs = {k: self._global(v, kw_specs[k]) for k, v in dyn_kwargs.items()}
            for store in stores:
                store.values = [self._global(v, P()) for v in store.values]
        return dynamic, dyn_kwargs

    def _global(self, value, spec):
        """Process-local data -> one global array (each process holds its slice of the batch)."""
        if value is None:
            return None

        def convert(leaf):
            if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
                return leaf  # already global
            if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                data = host_local_to_global(jax.random.key_data(leaf), self.mesh, spec)
                return jax.random.wrap_key_data(data, impl=jax.random.key_impl(leaf))
            return host_local_to_global(leaf, self.mesh, spec)

        return jax.tree.map(convert, value)

    def _wrap(self, pure, dynamic, dyn_kwargs):
        axis = DATA_AXIS

        def per_shard(store_values, dyn_args, dyn_kw, kinds):
            index = jax.lax.axis_index(axis)
            # Each shard draws its own dropout masks; the stream itself advances identically.
            local = [[jax.random.fold_in(v, index) if k == RNG else v for v, k in zip(vals, ks)]
                     for vals, ks in zip(store_values, kinds)]
            _transforms._data_axes.append((axis, lambda g: _mean_gradient(g, axis)))
            try:
                out, new_values = pure(local, dyn_args, dyn_kw)
            finally:
                _transforms._data_axes.pop()
            new_values = [
                [jax.random.split(old)[0] if k == RNG else _agree(v, axis)
                 for v, old, k in zip(vals, olds, ks)]
                for vals, olds, ks in zip(new_values, store_values, kinds)
            ]
            return jax.tree.map(lambda x: _output(x, axis), out), new_values

        arg_specs, kw_specs = self._specs(dynamic, dyn_kwargs)

        def step(store_values, dyn_args, dyn_kw):
            kinds = [list(s.kinds) for s in self._threaded_stores]
            if self.mode == "pmap":
                _tracked.append(False)
                try:
                    return self._pmapped(per_shard, kinds, store_values, dyn_args, dyn_kw,
                                         arg_specs, kw_specs)
                finally:
                    _tracked.pop()
            mapped = jax.shard_map(
                lambda sv, da, dk: per_shard(sv, da, dk, kinds), mesh=self.mesh,
                in_specs=(P(), arg_specs, kw_specs), out_specs=P(),
            )
            return mapped(store_values, dyn_args, dyn_kw)

        return step

    def _pmapped(self, per_shard, kinds, store_values, dyn_args, dyn_kw, arg_specs, kw_specs):
        n = self.shards

        def split(value, spec):
            if spec == P() or value is None:
                return value
            return jax.tree.map(lambda x: x.reshape(n, x.shape[0] // n, *x.shape[1:]), value)

        dyn_args = [split(d, s) for d, s in zip(dyn_args, arg_specs)]
        dyn_kw = {k: split(v, kw_specs[k]) for k, v in dyn_kw.items()}
        axes = ([0 if s != P() and d is not None else None for d, s in zip(dyn_args, arg_specs)],
                {k: 0 if kw_specs[k] != P() else None for k in dyn_kw})
        mapped = jax.pmap(lambda sv, da, dk: per_shard(sv, da, dk, kinds), axis_name=DATA_AXIS,
                          in_axes=(None, *axes), devices=list(self.mesh.devices.flat))
        out, values = mapped(store_values, dyn_args, dyn_kw)
        # Every replica holds the same result; keep the first.
        return jax.tree.map(lambda x: x[0], (out, values))

    def _call(self, stores, args, kwargs):
        self._threaded_stores = stores
        return super()._call(stores, args, kwargs)


def data_parallel(step_fn=None, mesh=None, batch_argnums=None, mode: str = "shard_map", *,
                  donate: bool = True, static_argnames=()):
    """Compile `step_fn` as a data-parallel step over `mesh` (default: every device, axis "data").

    Arguments:
        step_fn: a training step written for one device, e.g. `train_step(model, opt, x, y)`.
        mesh: a `jax.sharding.Mesh` with a "data" axis.
        batch_argnums: positions of the arguments to split along their first axis;
            default: every array argument that is not a module, optimizer, scheduler or scaler.
        mode: "shard_map" (default) or "pmap" for code written against pmap.

    Returns:
        a callable like `dl.jit(step_fn)`, whose results equal single-device training on
        the global batch. Usable as a decorator, with or without arguments.
    """
    if step_fn is None:
        return lambda fn: DataParallel(fn, mesh, batch_argnums, mode, donate, static_argnames)
    return DataParallel(step_fn, mesh, batch_argnums, mode, donate, static_argnames)
