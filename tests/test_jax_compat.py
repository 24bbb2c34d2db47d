"""jaxdl/_jax_compat.py: each name jaxdl takes from outside jax's stable API still does its job.

A JAX release that moves or changes one of them fails here, naming the function.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxdl import _jax_compat as compat


def _mesh():
    return Mesh(np.array(jax.devices()), ("data",))


def _eqns(fn, *args):
    return jax.make_jaxpr(fn)(*args).jaxpr.eqns


def test_innermost_scope_names_the_inner_named_scope_under_transforms():
    def loss(x):
        with jax.named_scope("outer"):
            with jax.named_scope("inner"):
                y = jnp.sin(x)
        return (y * 2.0).sum()

    eqns = _eqns(jax.grad(loss), jnp.ones(3))
    sin = [e for e in eqns if e.primitive.name == "sin"]
    assert [compat.innermost_scope(e.source_info.name_stack) for e in sin] == ["inner"]
    outside = [e for e in eqns if e.primitive.name == "reduce_sum"]
    assert outside and all(compat.innermost_scope(e.source_info.name_stack) is None
                           for e in outside)


def test_called_function_names_jit_and_custom_jvp_calls():
    @jax.jit
    def doubled(x):
        return 2 * x

    @jax.custom_jvp
    def cubed(x):
        return x ** 3

    cubed.defjvp(lambda primals, tangents: (cubed(primals[0]), 3 * primals[0] ** 2 * tangents[0]))
    eqns = _eqns(lambda x: jnp.sin(cubed(doubled(x))), jnp.ones(3))
    assert [compat.called_function(e) for e in eqns] == ["doubled", "cubed", None]


def test_name_p_is_the_primitive_checkpoint_name_binds():
    eqns = _eqns(lambda x: checkpoint_name(x * 2.0, "kept"), jnp.ones(3))
    named = [e for e in eqns if e.primitive is compat.name_p]
    assert [e.params["name"] for e in named] == ["kept"]


def test_jaxpr_core_types_and_sub_jaxprs():
    closed = jax.make_jaxpr(lambda x: jax.checkpoint(lambda y: jnp.sin(y) + 1.0)(x))(jnp.ones(2))
    assert isinstance(closed, compat.jaxpr_core.ClosedJaxpr)
    (remat,) = closed.jaxpr.eqns
    subs = list(compat.jaxpr_core.jaxprs_in_params(remat.params))
    assert len(subs) == 1 and [e.primitive.name for e in subs[0].eqns] == ["sin", "add"]
    assert any(isinstance(v, compat.jaxpr_core.Literal) for e in subs[0].eqns for v in e.invars)


def test_host_memory_is_the_space_of_a_value_moved_to_host():
    seen = []

    @jax.jit
    def f(x):
        y = jax.device_put(x, compat.HOST_MEMORY)
        seen.append((jax.typeof(x).memory_space, jax.typeof(y).memory_space))
        return x

    f(jnp.ones(2))
    assert seen[0][0] != compat.HOST_MEMORY and seen[0][1] == compat.HOST_MEMORY


def test_varying_axes_inside_shard_map():
    found = {}

    def per_shard(batch, weight):
        found["batch"], found["weight"] = compat.varying_axes(batch), compat.varying_axes(weight)
        return weight

    jax.shard_map(per_shard, mesh=_mesh(), in_specs=(P("data"), P()), out_specs=P())(
        jnp.ones((8, 2)), jnp.ones(2))
    assert found == {"batch": frozenset({"data"}), "weight": frozenset()}
    assert compat.varying_axes(jnp.ones(2)) == frozenset()


@pytest.mark.parametrize("use_private", [True, False])
def test_gather_replicated_returns_the_global_batch_typed_replicated(use_private):
    x = jnp.arange(16.0).reshape(8, 2)
    gather = jax.shard_map(lambda s: compat.gather_replicated(s * 10.0, "data", use_private=use_private),
                           mesh=_mesh(), in_specs=P("data"), out_specs=P())  # P(): must be replicated
    np.testing.assert_array_equal(gather(x), x * 10.0)


def test_host_local_to_global_in_one_process_is_the_array_sharded():
    local = np.arange(16.0).reshape(8, 2)
    out = compat.host_local_to_global(local, _mesh(), P("data"))
    assert out.sharding == NamedSharding(_mesh(), P("data"))
    np.testing.assert_array_equal(out, local)


def test_pallas_names_the_kernels_use_run_in_interpret_mode():
    pl, plgpu = compat.pallas, compat.pallas_triton

    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        cols = jax.lax.broadcasted_iota(jnp.int32, (1, 8), 1)
        tile = plgpu.load(x_ref.at[pl.ds(i, 1), pl.ds(0, 8)], mask=cols < 6, other=-1.0)
        plgpu.store(o_ref.at[pl.ds(i, 1), pl.ds(0, 8)], tile * 2.0, mask=cols < 8)

    x = jnp.arange(16.0).reshape(2, 8)
    out = pl.pallas_call(kernel, grid=(2,), out_shape=jax.ShapeDtypeStruct((2, 8), jnp.float32),
                         compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=2),
                         interpret=True)(x)
    np.testing.assert_array_equal(out, np.where(np.arange(8) < 6, np.asarray(x) * 2.0, -2.0))


def test_backends_started_once_a_computation_ran():
    # (before any computation it is False: tests/test_heap.py, in fresh processes)
    jnp.ones(2).block_until_ready()
    assert compat.backends_started()
