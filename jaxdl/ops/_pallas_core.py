"""One generic Pallas (Triton) row kernel, specialised per op by a `RowSpec`.

Every op of the family works on a 2-d array (rows, n) and reads it in tiles of
(block_rows, block_cols). An op is described by a `RowSpec`:
- `init/update`: the per-row statistics accumulated tile by tile (the online
  normalizer (m, d), sums, a running top-k), each carried as a (block_rows, width)
  float32/int32 array;
- `emit`: an elementwise output tile computed from the input tiles and the
  statistics (or from per-row scalars computed elsewhere);
- `merge`: how per-split statistics combine (in XLA, on tiny (rows, splits, width)
  arrays), for rows split across programs.

Three launch shapes follow (see `run_fused`, `run_stats`, `run_emit`):
- fused: one program per row block: a stats loop over the row's tiles, then an
  emit loop (one tile: loaded once);
- stats: grid (row blocks, splits), each program folds its share of tiles;
- emit: grid (row blocks, tiles), one output tile per program.

All refs are whole arrays indexed with `pl.ds` and masked loads/stores, so partial
blocks never read past the array (interpret mode pads with NaN; masked loads
replace those values by the fill) and every tensor shape is a power of two, as
Triton requires.
"""

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from jaxdl._jax_compat import pallas as pl
from jaxdl._jax_compat import pallas_triton as plgpu

BIG_INDEX = 2**31 - 1  # index of an empty top-k slot / an unavailable column


@dataclasses.dataclass(frozen=True)
class RowSpec:
    """How one op reads, reduces and writes a row.

    fills: the value a masked (out-of-range) element of each row input reads as.
    widths: the width of each carried statistic; dtypes: their dtypes.
    init(br) -> carry tuple; update(carry, tiles, cols, valid, scalars) -> carry;
    emit(tiles, cols, valid, scalars, carry) -> tuple of output tiles (float32).
    """

    name: str
    fills: tuple = ()
    widths: tuple = ()
    dtypes: tuple = ()
    init: Callable | None = None
    update: Callable | None = None
    emit: Callable | None = None


@dataclasses.dataclass(frozen=True)
class Blocks:
    """Static launch configuration: tile shape, splits per row, warps."""

    rows: int
    cols: int
    splits: int = 1
    num_warps: int = 4


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def choose_blocks(n_rows: int, n_cols: int, max_cols: int = 8192) -> Blocks:
    """GPU heuristic (untuned: no GPU measured yet).

    Rows up to `max_cols` fit one tile, so softmax reads x once; several short rows
    share a program (tiles of >= 2048 elements); long rows are split across programs
    when there are too few row blocks to fill the GPU.
    """
    bc = min(_pow2(n_cols), max_cols)
    br = max(1, min(_pow2(n_rows), 2048 // bc))
    row_blocks = -(-n_rows // br)
    tiles = -(-n_cols // bc)
    splits = 1
    if row_blocks < 128 and tiles > 4:
        splits = min(tiles, -(-512 // row_blocks))
        per = -(-tiles // splits)
        splits = -(-tiles // per)
    tile = br * bc
    return Blocks(br, bc, splits, 16 if tile >= 8192 else 8 if tile >= 4096 else 4)


def _load_rows(ref, r0, br, n_rows, width):
    """Load a (br, width) block of per-row scalars, width padded to a power of two."""
    w = _pow2(width)
    rows = r0 + lax.broadcasted_iota(jnp.int32, (br, w), 0)
    cols = lax.broadcasted_iota(jnp.int32, (br, w), 1)
    mask = (rows < n_rows) & (cols < width)
    return plgpu.load(ref.at[pl.ds(r0, br), pl.ds(0, w)], mask=mask, other=0)


def _store_rows(ref, r0, c0, val, n_rows):
    br, w = val.shape
    rows = r0 + lax.broadcasted_iota(jnp.int32, (br, w), 0)
    plgpu.store(ref.at[pl.ds(r0, br), pl.ds(c0, w)], val.astype(ref.dtype), mask=rows < n_rows)


def _tile_geometry(r0, c0, br, bc, n_rows, n_cols):
    rows = r0 + lax.broadcasted_iota(jnp.int32, (br, bc), 0)
    cols = c0 + lax.broadcasted_iota(jnp.int32, (br, bc), 1)
    return cols, (rows < n_rows) & (cols < n_cols)


def _load_tiles(refs, fills, r0, c0, br, bc, valid):
    return tuple(
        plgpu.load(ref.at[pl.ds(r0, br), pl.ds(c0, bc)], mask=valid, other=fill).astype(
            jnp.float32
        )
        for ref, fill in zip(refs, fills)
    )


def _kernel(*refs, spec, n_rows, n_cols, br, bc, n_in, n_scalars, scalar_widths, mode, tiles):
    ins, rest = refs[:n_in], refs[n_in:]
    scalar_refs, outs = rest[:n_scalars], rest[n_scalars:]
    i = pl.program_id(0)
    r0 = i * br
    scalars = tuple(
        _load_rows(ref, r0, br, n_rows, w) for ref, w in zip(scalar_refs, scalar_widths)
    )

    def tile_at(t):
        c0 = t * bc
        cols, valid = _tile_geometry(r0, c0, br, bc, n_rows, n_cols)
        return c0, cols, valid, _load_tiles(ins, spec.fills, r0, c0, br, bc, valid)

    def store_outputs(c0, valid, values):
        for ref, val in zip(outs, values):
            plgpu.store(ref.at[pl.ds(r0, br), pl.ds(c0, bc)], val.astype(ref.dtype), mask=valid)

    if mode == "emit":  # one tile per program; statistics arrive as scalars
        c0, cols, valid, x = tile_at(pl.program_id(1))
        n_carry = len(spec.widths)
        store_outputs(c0, valid, spec.emit(x, cols, valid, scalars[n_carry:], scalars[:n_carry]))
        return

    first = pl.program_id(1) * tiles if mode == "stats" else 0
    if mode == "fused" and tiles == 1:  # whole row in one tile: read it once
        c0, cols, valid, x = tile_at(0)
        carry = spec.update(spec.init(br), x, cols, valid, scalars)
        store_outputs(c0, valid, spec.emit(x, cols, valid, scalars, carry))
        return

    def fold(t, carry):
        _, cols, valid, x = tile_at(first + t)
        return spec.update(carry, x, cols, valid, scalars)

    carry = lax.fori_loop(0, tiles, fold, spec.init(br))
    if mode == "stats":
        s = pl.program_id(1)
        for ref, val, w in zip(outs, carry, spec.widths):
            _store_rows(ref, r0, s * w, val, n_rows)
        return

    def write(t, _):
        c0, cols, valid, x = tile_at(t)
        store_outputs(c0, valid, spec.emit(x, cols, valid, scalars, carry))
        return 0

    lax.fori_loop(0, tiles, write, 0)


def _call(spec, mode, grid, tiles, blocks, inputs, scalars, out_shape, interpret):
    n_rows, n_cols = inputs[0].shape
    kernel = functools.partial(
        _kernel, spec=spec, n_rows=n_rows, n_cols=n_cols, br=blocks.rows, bc=blocks.cols,
        n_in=len(inputs), n_scalars=len(scalars), scalar_widths=tuple(s.shape[1] for s in scalars),
        mode=mode, tiles=tiles,
    )
    return pl.pallas_call(
        kernel,
        grid=grid,
        out_shape=out_shape,
        compiler_params=plgpu.CompilerParams(num_warps=blocks.num_warps, num_stages=2),
        interpret=interpret,
        name=f"{spec.name}_{mode}",
    )(*inputs, *scalars)


def _grid(n_rows, n_cols, blocks):
    return -(-n_rows // blocks.rows), -(-n_cols // blocks.cols)


def run_stats(spec, inputs, scalars, blocks, interpret):
    """Per-split statistics: a tuple of (rows, splits, width) arrays."""
    n_rows, n_cols = inputs[0].shape
    row_blocks, n_tiles = _grid(n_rows, n_cols, blocks)
    per = -(-n_tiles // blocks.splits)
    splits = -(-n_tiles // per)
    out_shape = tuple(
        jax.ShapeDtypeStruct((n_rows, splits * w), dt) for w, dt in zip(spec.widths, spec.dtypes)
    )
    outs = _call(spec, "stats", (row_blocks, splits), per, blocks, inputs, scalars, out_shape,
                 interpret)
    return tuple(o.reshape(n_rows, splits, w) for o, w in zip(outs, spec.widths))


def run_emit(spec, inputs, scalars, out_dtypes, blocks, interpret):
    """Elementwise outputs from row inputs and per-row scalars (merged statistics first)."""
    n_rows, n_cols = inputs[0].shape
    out_shape = tuple(jax.ShapeDtypeStruct((n_rows, n_cols), dt) for dt in out_dtypes)
    return _call(spec, "emit", _grid(n_rows, n_cols, blocks), 1, blocks, inputs, scalars,
                 out_shape, interpret)


def run_fused(spec, inputs, scalars, out_dtypes, blocks, interpret):
    """Statistics then outputs, one program per row block."""
    n_rows, n_cols = inputs[0].shape
    row_blocks, n_tiles = _grid(n_rows, n_cols, blocks)
    out_shape = tuple(jax.ShapeDtypeStruct((n_rows, n_cols), dt) for dt in out_dtypes)
    return _call(spec, "fused", (row_blocks, 1), n_tiles, blocks, inputs, scalars, out_shape,
                 interpret)


def run_reduce_then_emit(spec, merge, inputs, out_dtypes, blocks, interpret):
    """Row statistics then elementwise outputs: fused when rows are not split."""
    if blocks.splits == 1:
        return run_fused(spec, inputs, (), out_dtypes, blocks, interpret)
    stats = merge(run_stats(spec, inputs, (), blocks, interpret))
    return run_emit(spec, inputs, stats, out_dtypes, blocks, interpret)
