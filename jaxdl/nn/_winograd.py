"""Stride-1 convolutions by Winograd's minimal filtering: 3x3 kernels by F(m x m, 3x3) with
output blocks of m = 2 or 4, 5x5 kernels by F(2x2, 5x5) (Lavin and Gray, "Fast Algorithms for
Convolutional Neural Networks", 2016).

Each m x m block of output pixels reads a t x t tile of the padded input (t = m + r - 1 for an
r x r kernel). With the tile d and the kernel g transformed as V = B^T d B and U = G g G^T (t x
t each), the block is A^T (U * V) A: t^2 multiplies per input channel instead of r^2 m^2.
Summed over input channels the multiplies become t^2 matrix products, one per tile position
(a, b): M[a, b] = U[a, b] (O, C) times V[a, b] (C, blocks); so a layer takes 2.25x (F(2x2,
3x3)), 4x (F(4x4, 3x3)) or 2.8x (F(2x2, 5x5)) fewer multiply-adds than as patches times
weights, in each of its three passes (autodiff transposes the products, and the transforms
are linear).

F(4x4, 3x3) also moves less memory: its tiles hold 2.25 values per input value, F(2x2, 3x3)'s
4, and on layers with 64 channels the transforms, not the products, took most of the time. It
ran a (8, 64, 64x64) -> 64 layer's forward+backward in 57 ms against 73 (one core; torch 51),
and lost only with few blocks, where the kernel's 36 transformed positions and their
gradients outweigh the products (docs/design.md, "Winograd with 4x4 output blocks").

The transforms are written for XLA's CPU fusion, for their transposes and for compile time
(docs/design.md, "Winograd's 3x3 convolutions"; one core):
- they are adds and scalings of slices: the kernel's transform as an einsum with G went to
  YNNPACK as products with a contraction of 3 and 4, 16-19 ms each for a 512x512 layer,
  against 0.3-3.6 ms as adds; but as ONE product with G (x) G (a contraction of 9, on the
  weights in their own layout) it runs faster still, so the kernel's transform and its
  tangent are that product (`_kernel_tiles`);
- they run rows first, then columns, each pass on whole slabs (t outputs, concatenated):
  written as 16 separate outputs of up to 9 terms, each layer added 0.7-1.8 s to the first
  step (LLVM's loop passes on 16-way fused loops); separable, 0.2-0.6 s;
- the input is first split into its m stride-m phases per axis, so that each tile element is
  a unit-stride slice of one phase (strided slices of the padded input ran the forward
  transform faster alone, but their transposes are pads with interior zeros: a (2, 64, 56x56)
  layer's gradient step took 15.2 ms against 12.4);
- pieces are taken by splits, not by indexing: the transpose of a split is a concatenate, of
  an index a pad of the whole array, which made the backward's transforms 16x the work (the
  gradient step of a (8, 256, 16x16) layer took 71 ms against 45);
- the output transform is one matrix product with A^T (x) A^T (m^2 x t^2), which compiles in a
  tenth of the time of its adds' transpose and runs as fast.

The values differ from a direct convolution's by rounding only. F(2x2, 3x3)'s coefficients
are 0, +-1 and +-1/2 and its transforms add at most 9 terms: relative 1e-6 in float32.
F(4x4, 3x3)'s reach 5 in B^T and 8 in A^T, and G's sixths and twenty-fourths are inexact, so
its rounding is about ten times larger: 4e-6 to 1.4e-5 relative to the largest value, against
XLA's convolution's 5e-7 to 9e-6 (docs/design.md, "Winograd with 4x4 output blocks").
F(2x2, 5x5) from the points 0, +-1, 1/2, -2 rounds its output and input gradient to 1.5e-6
of the largest value and its weight gradient to 7e-6 (torch's 5e-7 and 1.2e-6).
Half-precision inputs are transformed and multiplied in float32 and the output rounded once,
as a product with float32 accumulation would be.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._dtypes import accumulation_dtype


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: a nondiff argument
class _Transforms:
    """F(m x m, r x r): the tile transform B^T (t x t), the output transform A^T (m x t) and
    the kernel transform G (t x r), t = m + r - 1, from the interpolation points 0, +-1
    (F(2x2, 3x3)), 0, +-1, +-2 (F(4x4, 3x3)) or 0, +-1, 1/2, -2 (F(2x2, 5x5)) and infinity."""

    b_t: np.ndarray
    a_t: np.ndarray
    g: np.ndarray

    @property
    def m(self):
        return self.a_t.shape[0]

    @property
    def r(self):
        return self.g.shape[1]


_TRANSFORMS = {
    (2, 3): _Transforms(
        b_t=np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
        a_t=np.array([[1, 1, 1, 0], [0, 1, -1, -1]]),
        g=np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])),
    (4, 3): _Transforms(
        b_t=np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                      [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]),
        a_t=np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                      [0, 1, -1, 8, -8, 1]]),
        g=np.array([[6, 0, 0], [-4, -4, -4], [-4, 4, -4], [1, 2, 4], [1, -2, 4],
                    [0, 0, 24]]) / 24),
}
# F(2x2, 5x5) from the points 0, +-1, 1/2, -2 and infinity, as Toom-Cook gives them (A^T[i, j] =
# p_j^i, G[j, k] = p_j^k / prod over l != j of (p_j - p_l)): its weight gradient rounded to 7e-6
# of the largest value against 2e-5 with F(4x4, 3x3)'s points 0, +-1, +-2 (docs/design.md,
# "Winograd for 5x5 kernels")
_TRANSFORMS[2, 5] = _Transforms(
    b_t=np.array([[2, -3, -4, 3, 2, 0], [0, -2, 1, 5, 2, 0], [0, 2, -5, 1, 2, 0],
                  [0, -4, -2, 4, 2, 0], [0, 1, -2, -1, 2, 0], [0, 2, -3, -4, 3, 2]]) / 2,
    a_t=np.array([[2, 2, 2, 2, 2, 0], [0, 2, -2, 1, -4, 2]]) / 2,
    g=np.array([[15, 0, 0, 0, 0], [5, 5, 5, 5, 5], [-5, 5, -5, 5, -5], [-16, -8, -4, -2, -1],
                [1, -2, 4, -8, 16], [0, 0, 0, 0, 15]]) / 15)


def blocks(n, out_sizes, m):
    """How many m x m output blocks (columns of each product) a layer with n images has."""
    rows, cols = _block_grid(out_sizes, m)
    return n * rows * cols


def _block_grid(out_sizes, m):
    """The m x m output blocks per image along each axis (the last one cropped)."""
    return tuple(-(-size // m) for size in out_sizes)


# under its own jit, a layer shape's forward, tangent and transpose are traced once, however many
# layers have that shape (VGG-19 at 64 px: 0.1 s less to the first step); XLA inlines the call
@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def conv(x, w, padding, m, groups=1):
    """The stride-1 convolution of x (N, C, H, W) with w (O, C, r, r) (r = 3 or 5), padding
    ((lo, hi), (lo, hi)) of zeros (non-negative), by F(m x m, r x r) (m = 2 or 4 for 3x3
    kernels, 2 for 5x5): (N, O, H + lo + hi - r + 1, W + lo + hi - r + 1).

    `groups` splits the t^2 tile positions into that many runs of consecutive ones, each
    with its own transforms and products: chains of ops that do not depend on each other,
    which XLA's CPU runtime runs side by side on more than one core. One batched product
    over all positions ran on one core only: YNNPACK splits a product's output, not its
    batch, and an output of 64 x 392 is one piece ((36, 64, 64) x (36, 64, 392) 0.83 ms on
    one core, 0.89 on two), while twelve independent ones took 20.9 ms on one core and 10.5
    on two (2026-12-06, Intel Xeon VM; docs/design.md, "Winograd on two cores, and its kernel
    transform as one product")."""
    transforms = _TRANSFORMS[m, w.shape[-1]]
    acc = accumulation_dtype(x.dtype)
    out_sizes = [size + lo + hi - transforms.r + 1 for size, (lo, hi) in zip(x.shape[2:], padding)]
    tiles = _tiles(x.astype(acc), padding, out_sizes, transforms, groups)
    kernels = _kernel_tiles(w.astype(acc), transforms, groups)
    products = [jax.lax.dot_general(u, v, (((2,), (1,)), ((0,), (0,))))
                for u, v in zip(kernels, tiles)]
    return _output(products, x.shape[0], out_sizes, transforms).astype(x.dtype)


def _combine(coefficients, pieces):
    """sum over k of coefficients[k] * pieces[k], as adds, subtracts and scalings (no
    multiply for the coefficients +-1, no term for 0)."""
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


def _rows_then_columns(rows, transform, cols_of, groups):
    """The separable transform of t x t tiles: `rows` are the tile's row slabs
    (each (1, q, ...)), combined by `transform` into (t, q, ...); `cols_of` takes that
    array to its column slabs (each (t, 1, ...)), combined into (t, t, ...). With `groups`,
    the transform's rows are split into that many runs, each transformed on its own: a list
    of (rows in the run, t, ...)."""
    out = []
    for part in np.array_split(transform, groups):
        cols = cols_of(jnp.concatenate([_combine(coefficients, rows) for coefficients in part]))
        out.append(jnp.concatenate([_combine(coefficients, cols) for coefficients in transform], 1))
    return out


def _tiles(x, padding, out_sizes, transforms, groups):
    """x (N, C, H, W) -> V (t^2, C, N * blocks): each tile transformed, tile positions first,
    as `groups` arrays of consecutive positions."""
    n, c = x.shape[:2]
    m, t = transforms.m, transforms.b_t.shape[0]
    th, tw = _block_grid(out_sizes, m)
    # tile row k of block i is padded row m * (i + k // m) + k % m: the tiles reach `beyond`
    # blocks of m rows past the last block's start (the last block may itself be cropped)
    beyond = -(-(t - m) // m)
    pads = [(lo, m * (blocks + beyond) - size - lo, 0)
            for size, (lo, _), blocks in zip(x.shape[2:], padding, (th, tw))]
    x = jax.lax.pad(x, jnp.zeros((), x.dtype), [(0, 0, 0)] * 2 + pads)
    # (m, m, C, N, th + beyond, tw + beyond): row phase, column phase; tile row k of block i
    # is row i + k // m of row phase k % m, and the same for columns
    phases = jnp.split(jnp.transpose(x.reshape(n, c, th + beyond, m, tw + beyond, m),
                                     (3, 5, 1, 0, 2, 4)), m)
    rows = [phases[k % m][..., k // m:k // m + th, :] for k in range(t)]

    def columns(r):
        # the row pass is written out: fused into the column pass, each of its values is
        # recomputed by t outputs (measured for F(2x2, 3x3) with a 16-output column pass,
        # (2, 64, 56x56) layer: 1.96 s to compile and 13.3 ms a gradient step, against
        # 1.63 s and 12.7 ms)
        col_phases = jnp.split(jax.lax.optimization_barrier(r), m, 1)
        return [col_phases[l % m][..., l // m:l // m + tw] for l in range(t)]

    return [v.reshape(-1, c, n * th * tw)
            for v in _rows_then_columns(rows, transforms.b_t, columns, groups)]


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _kernel_tiles(w, transforms, groups):
    """w (O, C, r, r) -> U (t^2, O, C), as `groups` arrays of consecutive positions: each one
    product of G (x) G's rows for its positions (t^2 x r^2 in all) with the weights as (O*C,
    r^2).
    Written as separable adds, the transform read w across its rows (a 3x3 tap slab at a time)
    and ran 3-5x slower: 512 -> 512, F(2x2, 3x3), 6.5 against 1.3 ms; F(4x4, 3x3) 12.5 against
    2.4 ms (one core, Intel Xeon VM). Its tangent is the same product in the form whose
    transpose (`_kernel_tiles_tangent`), the weight gradient's last step, XLA runs as a plain
    product."""
    o, c = w.shape[:2]
    flat = w.reshape(o * c, -1)
    return [jax.lax.dot_general(jnp.asarray(rows, w.dtype), flat,
                                (((1,), (1,)), ((), ()))).reshape(-1, o, c)
            for rows in _kernel_transform_runs(transforms, groups)]


def _kernel_transform_runs(transforms, groups):
    """G (x) G (t^2 x r^2) as `groups` blocks of rows: those of the positions (a, b) with a in
    one run of G's rows, the runs `_tiles` and `_output` split the positions into."""
    g = transforms.g
    return [np.kron(part, g) for part in np.array_split(g, groups)]


@_kernel_tiles.defjvp
def _kernel_tiles_jvp(transforms, groups, primals, tangents):
    (w,), (dw,) = primals, tangents
    return _kernel_tiles(w, transforms, groups), _kernel_tiles_tangent(dw, transforms, groups)


def _kernel_tiles_tangent(dw, transforms, groups):
    """`_kernel_tiles` of dw, as (G (x) G)^T's columns times the taps (r^2, O*C): the
    transpose then takes dW^T (r^2, O*C) as a product of (G (x) G)^T with dU (t^2, O*C),
    which XLA gives YNNPACK. The barrier keeps XLA from folding dW^T's transpose into that
    product, which makes it contract both operands' major axes: Eigen products that took
    29 ms of a profiled VGG-19 step at 64 px (one core).

    Until 2026-12-06 (stop 51) the tangent was the transform's separable adds. Their
    transpose fuses into the optimizer's update, while the product's result (r^2 x O x C) is
    written and read once more; but the adds compiled 0.1-0.25 s slower a layer. Per layer,
    forward, backward and a momentum update (weights donated), adds / product, ms, Intel Xeon
    VM: one core (8, 512, 8x8) -> 512 44.5 / 42.9, (8, 256, 16x16) 29.8 / 28.8, (16, 128,
    16x16) 17.7 / 17.3; two cores 24.3 / 24.2, 21.5 / 20.6, 10.9 / 11.7 (docs/design.md,
    "The kernel transform's tangent as a product, and first steps side by side")."""
    o, c = dw.shape[:2]
    taps = jax.lax.optimization_barrier(dw.reshape(o * c, -1).T)
    return [jax.lax.dot_general(jnp.asarray(rows.T, dw.dtype), taps,
                                (((0,), (0,)), ((), ()))).reshape(-1, o, c)
            for rows in _kernel_transform_runs(transforms, groups)]


def _output(products, n, out_sizes, transforms):
    """M (t^2, O, N * blocks), as a list of runs of consecutive positions -> y (N, O,
    *out_sizes): each m x m block, interleaved."""
    m = transforms.m
    th, tw = _block_grid(out_sizes, m)
    o = products[0].shape[1]
    # one product with A^T (x) A^T (m^2 x t^2): as adds, its transpose (in the backward) was a
    # 16-output fusion that took 0.7 s to compile for a (2, 64, 56x56) layer
    # each run's columns of it: A^T (x) A^T for the positions (a, b) with a in that run
    a_t = transforms.a_t
    terms = [jax.lax.dot_general(jnp.asarray(np.kron(part, a_t), p.dtype), p,
                                 (((1,), (0,)), ((), ())))
             for p, part in zip(products, np.array_split(a_t, len(products), axis=1))]
    y = sum(terms[1:], terms[0]).reshape(m, m, o, n, th, tw)
    y = jnp.transpose(y, (3, 2, 4, 0, 5, 1)).reshape(n, o, m * th, m * tw)
    return y[:, :, :out_sizes[0], :out_sizes[1]]
