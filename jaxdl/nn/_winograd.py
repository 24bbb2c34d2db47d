"""3x3 stride-1 convolutions by Winograd's minimal filtering, F(2x2, 3x3) (Lavin and Gray,
"Fast Algorithms for Convolutional Neural Networks", 2016).

Each 2x2 block of output pixels reads a 4x4 tile of the padded input. With the tile d and
the kernel g transformed as V = B^T d B and U = G g G^T (4x4 each), the block is
A^T (U * V) A: 16 multiplies per input channel instead of 36. Summed over input channels
the multiplies become 16 matrix products, one per tile position (a, b):
M[a, b] = U[a, b] (O, C) times V[a, b] (C, tiles); so a layer takes 2.25x fewer
multiply-adds than as patches times weights, in each of its three passes (autodiff
transposes the products, and the transforms are linear).

The transforms are written for XLA's CPU fusion, for their transposes and for compile time
(docs/design.md, "Winograd's 3x3 convolutions"; one core):
- every coefficient is 0, +-1 or +-1/2, so the tile and kernel transforms are adds of slices;
  the kernel's transform as an einsum with G went to YNNPACK as products with a contraction
  of 3 and 4, 16-19 ms each for a 512x512 layer, against 0.3-3.6 ms as adds;
- they run rows first, then columns, each pass on whole slabs (four outputs, concatenated):
  written as 16 separate outputs of up to 9 terms, each layer added 0.7-1.8 s to the first
  step (LLVM's loop passes on 16-way fused loops); separable, 0.2-0.6 s;
- the input is first split into its four stride-2 phases, so that each tile element is a
  unit-stride slice of one phase (strided slices of the padded input ran the forward
  transform faster alone, but their transposes are pads with interior zeros: a (2, 64, 56x56)
  layer's gradient step took 15.2 ms against 12.4);
- pieces are taken by splits, not by indexing: the transpose of a split is a concatenate, of
  an index a pad of the whole array, which made the backward's transforms 16x the work (the
  gradient step of a (8, 256, 16x16) layer took 71 ms against 45);
- the output transform is one matrix product with A^T (x) A^T (4 x 16), which compiles in a
  tenth of the time of its adds' transpose and runs as fast.

The values differ from a direct convolution's by rounding only (relative 1e-6 in float32:
the transforms add at most 9 terms, and the 1/2 factors are exact). Half-precision inputs are
transformed and multiplied in float32 and the output rounded once, as a product with float32
accumulation would be.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._dtypes import accumulation_dtype

# The tile transform B^T, the output transform A^T and the kernel transform G of F(2x2, 3x3).
_B_T = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]])
_A_T = np.array([[1, 1, 1, 0], [0, 1, -1, -1]])
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])


def blocks(n, out_sizes):
    """How many 2x2 output blocks (columns of each product) a layer with n images has."""
    rows, cols = _block_grid(out_sizes)
    return n * rows * cols


def _block_grid(out_sizes):
    """The 2x2 output blocks per image along each axis (the last one cropped if odd)."""
    return tuple(-(-size // 2) for size in out_sizes)


def conv3x3(x, w, padding):
    """The stride-1 convolution of x (N, C, H, W) with w (O, C, 3, 3), padding ((lo, hi),
    (lo, hi)) of zeros (non-negative): (N, O, H + lo + hi - 2, W + lo + hi - 2)."""
    acc = accumulation_dtype(x.dtype)
    out_sizes = [size + lo + hi - 2 for size, (lo, hi) in zip(x.shape[2:], padding)]
    tiles = _tiles(x.astype(acc), padding, out_sizes)
    m = jax.lax.dot_general(_kernel_tiles(w.astype(acc)), tiles, (((2,), (1,)), ((0,), (0,))))
    return _output(m, x.shape[0], out_sizes).astype(x.dtype)


def _combine(coefficients, pieces):
    """sum over k of coefficients[k] * pieces[k], as adds and subtracts (the coefficients
    are 0, ±1 or ±1/2)."""
    total = None
    for coefficient, piece in zip(map(float, coefficients), pieces):
        if coefficient == 0:
            continue
        term = piece if abs(coefficient) == 1 else piece * abs(coefficient)
        if total is None:
            total = term if coefficient > 0 else -term
        else:
            total = total + term if coefficient > 0 else total - term
    return total


def _rows_then_columns(rows, transform, cols_of):
    """The separable transform of 4x4 (or 3x3) tiles: `rows` are the tile's row slabs
    (each (1, q, ...)), combined by `transform` into (t, q, ...); `cols_of` takes that
    array to its column slabs (each (t, 1, ...)), combined into (t, t, ...)."""
    cols = cols_of(jnp.concatenate([_combine(coefficients, rows) for coefficients in transform]))
    return jnp.concatenate([_combine(coefficients, cols) for coefficients in transform], 1)


def _tiles(x, padding, out_sizes):
    """x (N, C, H, W) -> V (16, C, N * tiles): each tile transformed, tile positions first."""
    n, c = x.shape[:2]
    th, tw = _block_grid(out_sizes)
    # padded to 2*th + 2 rows: the last block may reach one row past the output
    pads = [(lo, 2 * blocks + 2 - size - lo, 0)
            for size, (lo, _), blocks in zip(x.shape[2:], padding, (th, tw))]
    x = jax.lax.pad(x, jnp.zeros((), x.dtype), [(0, 0, 0)] * 2 + pads)
    # (2, 2, C, N, th + 1, tw + 1): row phase, column phase; tile row k of block i is row
    # i + k // 2 of row phase k % 2, and the same for columns
    phases = jnp.split(jnp.transpose(x.reshape(n, c, th + 1, 2, tw + 1, 2), (3, 5, 1, 0, 2, 4)), 2)
    rows = [phases[k % 2][..., k // 2:k // 2 + th, :] for k in range(4)]

    def columns(r):
        # the row pass is written out: fused into the column pass, each of its values is
        # recomputed by four outputs (measured with a 16-output column pass, (2, 64, 56x56)
        # layer: 1.96 s to compile and 13.3 ms a gradient step, against 1.63 s and 12.7 ms)
        col_phases = jnp.split(jax.lax.optimization_barrier(r), 2, 1)
        return [col_phases[l % 2][..., l // 2:l // 2 + tw] for l in range(4)]

    v = _rows_then_columns(rows, _B_T, columns)
    return v.reshape(16, c, n * th * tw)


def _kernel_tiles(w):
    """w (O, C, 3, 3) -> U (16, O, C)."""
    taps = jnp.transpose(w, (2, 3, 0, 1))
    u = _rows_then_columns(jnp.split(taps, 3), _G, lambda r: jnp.split(r, 3, 1))
    return u.reshape(16, *w.shape[:2])


def _output(m, n, out_sizes):
    """M (16, O, N * tiles) -> y (N, O, *out_sizes): each 2x2 block, interleaved."""
    th, tw = _block_grid(out_sizes)
    o = m.shape[1]
    # one product with A^T (x) A^T (4 x 16): as adds, its transpose (in the backward) was a
    # 16-output fusion that took 0.7 s to compile for a (2, 64, 56x56) layer
    a = jnp.asarray(np.kron(_A_T, _A_T), m.dtype)
    y = jax.lax.dot_general(a, m, (((1,), (0,)), ((), ()))).reshape(2, 2, o, n, th, tw)
    y = jnp.transpose(y, (3, 2, 4, 0, 5, 1)).reshape(n, o, 2 * th, 2 * tw)
    return y[:, :, :out_sizes[0], :out_sizes[1]]
