"""Convolutions for XLA's CPU backend: seven lowerings, chosen per shape and per pass.

XLA's own CPU convolution is fine on most shapes but has cliffs (docs/design.md,
"CPU convolutions"): depthwise convolutions run 10-100x slower than torch, and so
does a convolution whose output map has a handful of pixels (a 3x3 conv on a 2x2
map with 512 channels: 100-280 ms against torch's 2-3 ms), or the input gradient of
a strided one. The same layers written without a convolution op are fast:

- "xla": `lax.conv_general_dilated`, channels-last.
- "patches": one strided slice of the padded input per kernel offset, stacked into a
  (pixels, k*k*C) matrix, times the weights as a (k*k*C, O) matrix. Its transpose (the
  input gradient) is a matrix product followed by col2im, which XLA fuses into pads
  and adds. groups == 1 only.
- "shifts": for depthwise convolutions (one input channel per group), the sum over
  kernel offsets of a strided slice times that offset's per-channel weights: one
  fused elementwise loop, no convolution at all. Its gradients are written out rather
  than left to autodiff, which made nine reductions (one per offset, each over its
  materialised view) for the weight gradient and, with stride 2, a pass over dy
  padded with zeros between pixels for the input gradient: the weight gradient is one
  reduce with nine operands (a single pass over x and dy) and the input gradient is
  computed per stride phase from contiguous slices of dy, then interleaved. MobileNetV2's
  depthwise layers went from 0.37-0.78x torch (forward+backward, one core) to 1.0-1.6x.
- "image_matmul": channels-first, each image's (C*k*k, pixels) patch matrix (for a 1x1
  kernel the image itself, no copy) times the weights as an (O, C*k*k) matrix, one
  product per image. The output comes out channels-first, so no layout transposes
  surround it; that is what makes it beat XLA's convolution (whose NHWC transposes
  around an isolated layer cost as much as a 1x1 convolution) on large maps. Its
  product has a custom JVP that gives each pass its faster product form.
- "matmul": channels-first, 1x1 kernels only: one product over all images at once,
  (O, C) x (C, N*pixels), then one transpose of the output; for maps under 28x28 with
  many channels, where per-image products run slowly (below 14x14 the products are too
  small; on 14x14-27x27 maps summing their weight gradients over the images is slow on
  two cores). From 14x14 maps the weight gradient is one product per image summed over the
  images, and on one core the forward pass too is one product per image; the input gradient
  keeps the one product (a custom JVP).
- "whole_map": channels-first, stride 1, for input maps with fewer pixels than the kernel
  has offsets (a 3x3 layer on a 2x2 map): each image's whole map as one row times a
  (O*out pixels, C*in pixels) matrix built from the kernel. Each output pixel reads every
  input pixel through one offset, so it multiplies no padding (patches would do 9 products
  per output where 4 read data).
- "winograd" and "winograd4": channels-first, 3x3 kernels with stride 1 and no dilation:
  Winograd's F(2x2, 3x3), 16 matrix products over transformed tiles, 2.25x fewer
  multiply-adds, and F(4x4, 3x3), 36 products, 4x fewer (`_winograd`), for layers with
  enough output blocks and channels; "winograd4" where there are enough 4x4 blocks. A 5x5
  layer with enough blocks takes "winograd" as F(2x2, 5x5): 36 products, 2.8x fewer.

Before any of them, `crop_dead_taps` drops the kernel offsets that read only padding (a 3x3
layer on a 1x1 map keeps its centre), and `plan` sees the cropped kernel.

`plan` picks one lowering for the forward pass, one for the input gradient and one
for the weight gradient, by a rule read off a table measured on this project's
machine (docs/design.md says why a rule and not timing). When the three agree
(and are not "shifts") the lowering is differentiated as it is (any order, forward or
reverse mode); otherwise a custom VJP runs each gradient through its own lowering's
transpose ("shifts": the written-out gradients above). A custom VJP has no forward
mode: `jax.jvp` through such a convolution needs `dl.backends.cpu.benchmark = False`.

Activations are channels-last, x (N, *S, C), for "xla" and "patches", and channels-first,
x (N, C, *S), as the model's own, for the others (`Plan.channels_last`); weights keep PyTorch's layout
(C_out, C_in/groups, *K): a transposed copy of a large weight, made every step, cost
more than the matrix product that used it (100 ms for a 512x512x3x3 weight).
"""

import dataclasses
import functools
import itertools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from jaxdl._dtypes import accumulation_dtype
from jaxdl.nn import _winograd
from jaxdl.nn._windows import interleave_phases, stack_windows, window_views

# Output maps with at most this many pixels (3x3) are "tiny": a matrix product over patches
# beats XLA's convolution there (2x2 maps 50-100x). On 4x4 maps the two are within 1.3x
# and which wins depends on the CPU (patches on a Xeon, XLA on a Zen 5), so the batch
# decides there, through _FEW_ROWS (docs/design.md).
_TINY_MAP = 9
# With this few output rows (images x pixels) XLA's convolution costs about what the
# transposed copy of its weight (OIHW to HWIO, made every step) costs; "patches" uses the
# weight as it is: 3x3 layers on 7x7 maps at batch 2 ran 1.5-1.7x faster (docs/design.md).
_FEW_ROWS = 128
# On more than one core XLA's convolution scales poorly (its matrix products allocate packing
# buffers at every call, and two threads then contended for the one malloc arena that _heap.py
# set until stop 57; and its patch packing took twice the core time): "patches" ran 1x1 and 3x3
# layers (k*k <= _FEW_TAPS) with up to this many output rows (images x pixels) 3-30% faster, two
# cores each: ResNet-18's 256-channel 3x3 layers on 14x14 maps at batch 2 (392 rows) 11.2 -> 9.3
# ms (torch 7.3), VGG-16's 512-channel ones on 4x4 maps at batch 16 22.8 -> 20.3 ms. At 512 rows
# 3x3 layers with 128 channels lost by 16% (8x8 maps at batch 8), at 1024 and more all lost; on
# one core XLA's won at 392 rows by 4% (docs/design.md, "Two cores: patches for small maps").
_FEW_ROWS_MULTICORE = 400
_FEW_TAPS = 9
# On one core too once a patch row (C*k*k values) has at least this many: forward+backward,
# ms, patches against XLA's convolution (2026-12-07, Intel Xeon VM, torch in brackets), 392
# rows: (2, 256, 28x28) -> 256 stride 2 12.8 / 15.6 (12.4), (2, 128, 28x28) -> 256 stride 2
# 6.3 / 7.1 (6.1); 256 rows: (16, 128, 4x4) -> 192 2.79 / 2.88, -> 128 1.97-2.03 / 1.99-2.03,
# (16, 128, 8x8) -> 128 stride 2 2.34 / 2.27-2.30, (16, 128, 4x4) -> 256 3.59 / 3.81, 48 4x4
# blocks (12, 512, 4x4) -> 512 21.6 / 30.6 (22.3); narrower rows lost by 2-4% ((16, 96, 4x4) ->
# 128, (16, 64, 8x8) -> 128 stride 2). The 4% loss at 392 rows above was measured while the
# patch matrix was built by one stack of the k*k offsets (see `_patches`).
_WIDE_PATCH_ROW = 1152
# Per-image products need this many output pixels (14x14) to run fast: over the 1x1 layers
# of the reference CNNs, at 196 pixels or more "image_matmul" took 0.35-1.1x the time of
# XLA's convolution, below that up to 40x longer (docs/design.md, "CPU convolutions").
_IMAGE_PIXELS = 196
# Below this many output pixels (16x16) per image the per-image products keep the plain form
# (weights as (O, K)) in the forward and weight-gradient passes, not the transposed one that
# runs faster there on large maps, and take the transposed form for the input gradient, where
# it is the other way round (_per_image_product_jvp). On the Intel Xeon VM (2026-12-06),
# forward+backward, one core: GoogLeNet's 1x1 layers with 480-832 input channels on 14x14
# maps at batch 2 took 0.82-0.93x the time in the plain form (512 -> 128: 2.08 -> 1.75 ms;
# 832 -> 256: 5.95 -> 5.17), MobileNetV2's 384 -> 64 and 576 -> 96 0.91-0.94x; two cores
# 0.91-0.95x. At 16x16 (batch 8) the transposed form won for 256 -> 64 (1.80 against 1.98 ms)
# and tied for 512 -> 128, and at 28x28 it won by 3-13% (docs/design.md, "Small maps: the
# plain product form"; the input gradient: "The weight gradient's sum over images on small
# maps").
_TRANSPOSED_PIXELS = 256
# A 1x1 layer on a map of fewer than _FOLDED_PIXELS (28x28) takes one product over all
# images ("matmul") once C*O reaches _MATMUL_WEIGHTS. On maps of 14x14 to 27x27 per-image
# products would also run, but their weight gradients, one (C, O) block per image, are then
# summed over the images by a YNNPACK reduce that ran slower on two cores than on one
# (a (2, 1024, 256) sum: 0.2 ms on one core, 2.9 ms on two). ResNet-50's 1024 -> 256
# layer at 14x14, batch 2, forward+backward 10.4 / 10.2 ms (one core / two) against
# 7.5 / 3.9 ms as one product (torch 7.3 / 4.3); its step at 224 px on two cores 499 -> 464
# and 499 -> 471 ms. With fewer weights one product lost on one core (docs/design.md,
# "Small maps: one product over all images"). On 14x14 and larger maps the "matmul" lowering's
# own passes have since taken per-image forms where they won (_IMAGE_FORWARD_PIXELS,
# _IMAGE_WEIGHT_GRAD_PIXELS).
_FOLDED_PIXELS = 784
_MATMUL_WEIGHTS = 2 ** 18
# On one core a "matmul" layer on maps of at least _IMAGE_FORWARD_PIXELS (14x14) runs its
# forward pass as one product per image (_matmul_product), so the output needs no
# transpose; measured in stop 56, while both gradients were one product over all images.
# Forward+backward, one core (Intel Xeon VM, 2026-12-07), batch 2: ResNet-50's 256 -> 1024
# layer on 14x14 maps 4.64-5.09 against 5.02-5.35 ms back to back, 6.24 against 6.79 in
# benchmarks/conv_layers.py's rounds with torch (cold caches; 0.81x against 0.80x torch); its
# 1024 -> 256 even back to back, 6.42 against 7.22 ms in those rounds. On 7x7 maps per-image
# products lost (512 -> 2048: 7.1 against 5.4 ms), and on two cores they lost 3-7%. ResNet-50's
# step at 224 px, one core, ab.py with / without: 628 / 641 ms with the change as A, 628 / 620
# as B (the side compiled second runs ~1.6% slower): even.
_IMAGE_FORWARD_PIXELS = 196
# On maps of at least _IMAGE_WEIGHT_GRAD_PIXELS (14x14) a "matmul" layer's weight gradient, on
# any number of cores, is one product per image summed by adds of slices (_weight_tangent's
# stack), not one product over all images: that one needed dy moved to (O, N*pixels) first, a
# copy XLA's loop ran at 0.55-0.6 ms for 1.6 MB (ResNet-50's 256 -> 1024 layer at batch 2), a
# third of a product's time. Forward+backward alone (the forward as the rule above has it),
# medians of interleaved rounds, ms, summed per image / one product (torch), Intel Xeon VM
# (2026-12-07), batch 2 on 14x14 maps: one core 256 -> 1024 5.83 / 7.03 (5.79), 1024 -> 256 6.07
# / 6.52 (6.05); two cores 256 -> 1024 3.49 / 4.12 (3.58), 1024 -> 256 3.15 / 3.72 (3.71), 512
# -> 1024 (stride 2, from 28x28) 6.47 / 7.01 (6.51); batch 8, 256 -> 1024, one core 25.8 /
# 28.8 (21.3), two 13.2 / 14.1 (11.4). On 7x7 and 4x4 maps the one product won (512 -> 2048 at
# batch 2, one core: 7.61 against 7.28 ms; 256 -> 1024 on 4x4 at batch 8: 2.50 against 1.85).
_IMAGE_WEIGHT_GRAD_PIXELS = 196
# On more than one core, a per-image weight gradient with at least this many elements (C*k*k
# x O) is summed over the images by adds of slices in XLA's own loop, not by YNNPACK's reduce
# over the leading axis, which ran up to 30x slower on two cores than on one: (2, 1024, 256)
# 0.12 ms on one core, 2.7 ms on two; adds of slices 0.06 / 0.08 ms. Below it the reduce
# was faster ((8, 256, 64): 0.43 against 0.77 ms for the whole weight gradient), except with
# two images or fewer (_SLICED_SUM_IMAGES). On one core the transposed form's reduce stays: its
# product (columns times dy) ran up to 22% faster there (docs/design.md, "The sum over
# images"); the plain form always takes adds of slices, whose batched product ran 2x faster
# than the reduce's on 14x14 maps (docs/design.md, "The weight gradient's sum over images
# on small maps").
_SLICED_SUM_WEIGHTS = 2 ** 15
_SLICED_SUM_IMAGES = 2
# Kernels up to 7x7 (ResNet's stem) may take "image_matmul": alone, a 7x7 stem ran at
# 0.7-1.3x XLA's time, but in a model XLA's NHWC output is transposed back inside
# BatchNorm's fused loops, which runs slowly (ResNet-18 at 224 px: 423 -> 398 ms a step).
_IMAGE_TAPS = 49
# A k x k layer takes "image_matmul" only when its patch matrices (all images) stay under
# this many elements (16 MiB of float32): larger ones lost to XLA's convolution (memory bound).
_PATCH_ELEMENTS = 2 ** 22


# A stride-1 layer whose input map has fewer pixels than its kernel has offsets (a 3x3 layer on
# a 2x2 map) takes "whole_map" for a batch of at least _MAP_IMAGES while its map matrix, (O*out
# pixels, C*in pixels), has at most _MAP_MATRIX_ELEMENTS (4 MiB of float32). Forward+backward
# of (16, 256, 2x2) 3x3 -> 256, one core: 1.76 ms against patches' 3.03 (two cores 1.17 against
# 1.58). Building the matrix (a strided copy of the kernel) and summing its gradient back cost
# what a larger matrix saves: with 512 channels, 8.0 against 6.6 ms at batch 8. With 8 images,
# GoogLeNet's step at 64 px read 1.2-2.8% slower on one core in three A/Bs, its 160 -> 320 layer's
# 3.3 MB matrix taking 1.15 ms to build against 1.24 ms in its products (docs/design.md).
_MAP_MATRIX_ELEMENTS = 2 ** 20
_MAP_IMAGES = 16

# A 3x3 stride-1 layer takes "winograd" (2.25x fewer multiply-adds) on one core with at least
# _WINOGRAD_BLOCKS 2x2 output blocks (images x blocks: the columns of its products) and
# _WINOGRAD_CHANNELS input and output channels. Forward+backward, ms, against the lowering chosen
# before (2026-12-06, Zen 4, one core; docs/design.md, "Winograd's 3x3 convolutions"): (8, 256,
# 16x16) -> 256 (512 blocks) 45 against 72; (2, 64, 56x56) -> 64 12.4 against 15.8; (2, 256,
# 14x14) -> 256 (98 blocks) 12.2 against 16.9. With 32 blocks (512 channels on 7x7 maps at
# batch 2, or 4x4 maps at batch 8) the kernel's transforms and short products cost more than
# they save (25 against 17 ms), and with 3 input channels (a stem) the products are too thin.
_WINOGRAD_BLOCKS = 96
_WINOGRAD_CHANNELS = 64
# With _WINOGRAD_CHANNELS_WIDE channels or more, one core takes it from _WINOGRAD_BLOCKS_WIDE
# blocks, since its kernel transform became one product (`_winograd._kernel_tiles`).
# Forward+backward, ms, F(2x2, 3x3) against the lowering chosen before (2026-12-06, Intel Xeon
# VM, one core, torch in brackets): (16, 512, 4x4) -> 512 24.8 / 30.6 (28.0), (16, 256, 4x4) ->
# 512 11.8 / 14.4 (13.6), (4, 512, 8x8) -> 512 23.1 / 30.1 (25.5); steps (`benchmarks/ab.py`,
# 64 blocks against 96): VGG-16 at 32 px 572 / 628 ms, VGG-19 628 / 693, VGG-11 448 / 474. With
# 128 channels a layer won alone ((16, 128, 4x4) -> 128 1.51 / 1.75) but ResNet-18's step at 32
# px ran 2% slower (61.8 / 60.3). Two cores keep _WINOGRAD_BLOCKS: patches won there ((16, 512,
# 4x4) 13.9 against 14.8).
_WINOGRAD_CHANNELS_WIDE = 256
_WINOGRAD_BLOCKS_WIDE = 64
# On more than one core its many small loops and products scale worse than one convolution or
# product, so small layers keep the lowering chosen before: two cores, forward+backward, ms,
# Winograd against that lowering (2026-12-06, Zen 4, the separable transforms of stop 45): it
# lost with 64 channels on 16x16 maps at batch 8 (512 blocks: 4.2 against 3.4) and tied with
# 128 channels on 8x8 at batch 8 (channels x blocks 2^14: 2.8 against 2.8); it won from
# channels x blocks of _WINOGRAD_WORK_MULTICORE with 128 channels or more ((2, 256, 14x14) ->
# 256, 98 blocks: 7.2 against 8.9; (2, 384, 13x13) -> 256: 10.4 against 11.7), and of
# _WINOGRAD_WORK_NARROW with fewer ((2, 64, 56x56) -> 64: 8.1 against 10.2; (8, 64, 32x32) ->
# 64: 10.0 against 11.8).
_WINOGRAD_CHANNELS_MULTICORE = 128
_WINOGRAD_WORK_MULTICORE = 20_000
_WINOGRAD_WORK_NARROW = 2 ** 16
# A layer that takes Winograd on one core takes F(4x4, 3x3) ("winograd4"), on any number of
# cores, once it has _WINOGRAD4_BLOCKS 4x4 output blocks: 4x fewer multiply-adds than patches,
# and tiles 2.25x its input against F(2x2, 3x3)'s 4x. Forward+backward, ms, F(2x2) against
# F(4x4) (2026-12-06, Intel Xeon VM, one core; torch in brackets): (8, 64, 64x64) -> 64 73.3 /
# 56.8 (50.7); (2, 64, 56x56) -> 64 9.7 / 7.9 (9.6); (8, 256, 16x16) -> 256 (128 blocks) 33.5 /
# 28.4; (8, 512, 16x16) -> 512 (128) 120 / 107; (2, 128, 28x28) -> 128 (98) 7.6 / 6.6; (2, 512,
# 28x28) -> 512 (98) 105 / 106. With 32 blocks it lost ((8, 512, 8x8) 41 / 53; (2, 256, 14x14)
# 10.2 / 12.1: the kernel's 36 transformed positions and their gradients outweigh the
# products). Narrow layers with 32-64 blocks won alone ((16, 64, 8x8) -> 192 (64) 3.80 / 3.37;
# two cores (8, 128, 8x8) -> 128 (32), XLA's convolution 2.9 / 2.4) but not in the steps
# (`benchmarks/ab.py`, ResNet-18 at 32 px, VGG-16 at 32 px, GoogLeNet at 32 px: within 2% either
# way; ResNet-50 at 64 px two cores 158.5 -> 163.0 ms), so they keep F(2x2, 3x3). On two cores
# F(4x4, 3x3) also beat what the two-core rule had chosen (XLA's convolution or image_matmul,
# ms): (8, 64, 16x16) -> 64 3.6 / 2.5, (2, 96, 28x28) -> 128 5.4 / 4.2 (docs/design.md,
# "Winograd with 4x4 output blocks").
_WINOGRAD4_BLOCKS = 96
# F(2x2, 3x3)'s transformed tiles and products, 16 x channels x blocks each, are four times the
# activations they come from (F(4x4, 3x3)'s 2.25 times), and the tiles are kept for the weight
# gradient: above this many elements (128 MiB of float32) a layer keeps XLA's convolution,
# whose working set is small.
# VGG-16 at 224 px with 256 images would otherwise need a 37 GiB working set for its first
# layers (`dl.memory.plan`); ResNet-18 and VGG-16 at 224 px with 2 images stay under it.
_WINOGRAD_TILE_ELEMENTS = 2 ** 25
# On more than one core Winograd's tile positions are split into this many independent chains
# of transforms and products, which run side by side (`_winograd.conv`). `benchmarks/ab.py`,
# one process, two cores, ms, one chain against two (2026-12-06, Intel Xeon VM): ResNet-18 at
# 224 px 161.6 / 153.2, 149.9 / 145.4, 152.9 / 143.3; ResNet-50 at 224 px, VGG-16 at 64 px and
# ResNet-18 at 64 px within 1%. Three chains ran as two. Each layer's first step takes 0.1 s
# more (ResNet-18 at 224 px 0.5-1.0 s); on one core they would buy nothing, so it keeps one.
_WINOGRAD_GROUPS_MULTICORE = 2
# A 5x5 stride-1 layer (AlexNet's second) takes F(2x2, 5x5) ("winograd": 36 products over 6x6
# tiles, 2.8x fewer multiply-adds than patches) from _WINOGRAD5_BLOCKS 2x2 output blocks, with
# _WINOGRAD_CHANNELS channels. Forward+backward, ms, against XLA's convolution (2026-12-06, Intel
# Xeon VM, torch in brackets): one core, (2, 64, 27x27) -> 192 (392 blocks) 15.6 / 20.9 (16.2),
# (8, 64, 7x7) -> 192 (128 blocks) 4.9 / 5.3 (4.6); two cores, the first 12.1 / 14.6, the second
# 5.2 / 4.8. Steps (`benchmarks/ab.py`): AlexNet at 224 px 180.0 / 186.5 ms one core, 103.2 /
# 105.8 two; at 64 px (128 blocks) 153.7 / 148.2 one core, so it keeps XLA's there
# (docs/design.md, "Winograd for 5x5 kernels").
_WINOGRAD5_BLOCKS = 256
# F(2x2, r x r) computes whole 2x2 output blocks: on an odd map the last row and column of
# blocks are half cropped, work done for nothing. A 3x3 layer keeps it only where at least this
# fraction of its blocks' pixels are output. AlexNet's 3x3 layers on 13x13 maps at 224 px (7x7
# blocks for 13x13 pixels, 86%), batch 2, took patches faster: (2, 384, 13x13) -> 256 forward
# and backward, one core, 15.0 ms against 15.7 (torch 12.5); the step (`benchmarks/ab.py`,
# 2026-12-07, Intel Xeon VM) 177.5 -> 172.9 ms on one core, 105.2 -> 104.3 on two, its first
# step 4.5 -> 3.8 s. On 7x7 maps (77%) it ran even with XLA's convolution ((8, 64, 7x7) -> 192:
# 2.12 against 2.15 ms). F(4x4, 3x3) keeps its block count alone as the measure, and F(2x2, 5x5)
# on AlexNet's 27x27 maps (93%) won (above).
_WINOGRAD2_FILL = 0.9


@dataclasses.dataclass(frozen=True)
class Plan:
    """A convolution's geometry and the lowering of each pass (hashable: a static argument)."""

    stride: tuple
    padding: tuple  # (lo, hi) per spatial axis
    dilation: tuple
    groups: int
    forward: str = "xla"
    input_grad: str = "xla"
    weight_grad: str = "xla"
    channels_last: bool = True  # x (N, *S, C); else (N, C, *S), for the channels-first lowerings


def _out_sizes(spatial, kernel, stride, dilation):
    return tuple((size - d * (k - 1) - 1) // s + 1
                 for size, k, s, d in zip(spatial, kernel, stride, dilation))


def plan(x_shape, w_shape, stride, padding, dilation, groups, choose: bool = True) -> Plan:
    """The lowerings for a convolution of x (N, *S, C) with w (O, C/groups, *K).

    `choose=False` keeps XLA's convolution for every pass (`dl.backends.cpu.benchmark = False`).
    """
    geometry = Plan(tuple(stride), tuple(map(tuple, padding)), tuple(dilation), groups)
    if not choose:
        return geometry
    kernel = w_shape[2:]
    padded = [size + lo + hi for size, (lo, hi) in zip(x_shape[1:-1], padding)]
    outs = _out_sizes(padded, kernel, stride, dilation)
    if w_shape[1] == 1 and groups > 1:  # depthwise (any channel multiplier)
        return _channels_first(geometry, "shifts")
    if groups != 1:
        return geometry
    pixels, taps = math.prod(outs), math.prod(kernel)
    rows = x_shape[-1] * taps  # of the patch matrix: C*k*k
    if set(stride) | set(dilation) == {1} and min(itertools.chain(*padding)) >= 0:
        winograd = _winograd_lowering_for(kernel, x_shape[-1], w_shape[0], x_shape[0], outs)
        if winograd:
            return _channels_first(geometry, winograd)
    if (taps == 1 and _TINY_MAP < pixels < _FOLDED_PIXELS
            and rows * w_shape[0] >= _MATMUL_WEIGHTS):
        return _channels_first(geometry, "matmul")
    if taps == 1 and pixels >= _IMAGE_PIXELS:
        return _channels_first(geometry, "image_matmul")
    if (1 < taps <= _IMAGE_TAPS and pixels >= max(_IMAGE_PIXELS, rows / 2)
            and x_shape[0] * rows * pixels <= _PATCH_ELEMENTS):
        return _channels_first(geometry, "image_matmul")
    in_pixels = math.prod(x_shape[1:-1])
    if (in_pixels < taps and pixels > 1 and set(stride) | set(dilation) == {1}
            and x_shape[0] >= _MAP_IMAGES
            and x_shape[-1] * w_shape[0] * in_pixels * pixels <= _MAP_MATRIX_ELEMENTS):
        return _channels_first(geometry, "whole_map")
    out_rows = x_shape[0] * pixels
    wide = taps > 1 and rows >= _WIDE_PATCH_ROW
    if (pixels <= _TINY_MAP or (taps > 1 and out_rows <= _FEW_ROWS)
            or (taps <= _FEW_TAPS and out_rows <= _FEW_ROWS_MULTICORE
                and (_cores() > 1 or wide))):
        return dataclasses.replace(geometry, forward="patches", input_grad="patches",
                                   weight_grad="patches")
    if taps == 1 and any(s > 1 for s in stride) and x_shape[-1] >= 16:
        # XLA computes a strided convolution's input gradient as a convolution over a
        # zero-dilated image. For a 1x1 kernel patches ran it faster (ResNet-50's 1024 ->
        # 2048 at 14x14, batch 2: 4.2 against 5.0 ms); for larger kernels XLA's won once
        # the output map has more than 9 pixels (3x3 layers 3-45% faster, 5x5 and 7x7 2x:
        # docs/design.md, "Strided input gradients"). Its cliff, a 3x3 layer on a 2x2
        # output map (24 against 0.9 ms), takes patches through the tiny-map rule above.
        return dataclasses.replace(geometry, input_grad="patches")
    return geometry


def _winograd_lowering_for(kernel, in_channels, out_channels, n, outs):
    """"winograd" (F(2x2, r x r)), "winograd4" (F(4x4, 3x3)) or None for a stride-1 layer."""
    if tuple(kernel) == (3, 3):
        return {2: "winograd", 4: "winograd4"}.get(
            _winograd_block_size(in_channels, out_channels, n, outs))
    if tuple(kernel) == (5, 5) and _winograd_fits(in_channels, out_channels, outs,
                                                  _winograd.blocks(n, outs, 2),
                                                  _WINOGRAD5_BLOCKS, tile_positions=36):
        return "winograd"
    return None


def _winograd_fits(in_channels, out_channels, outs, blocks, least, tile_positions):
    """Whether a layer has the channels, the 2x2 output blocks (at least `least`) and the map
    Winograd pays on, with its transformed tiles (tile_positions x channels x blocks) within the
    memory bound. A tiny map's blocks are mostly cropped: (16, 256, 3x3) -> 256 took 6.1 ms,
    patches 4.2."""
    return (min(in_channels, out_channels) >= _WINOGRAD_CHANNELS and blocks >= least
            and math.prod(outs) > _TINY_MAP
            and tile_positions * max(in_channels, out_channels) * blocks <= _WINOGRAD_TILE_ELEMENTS)


def _winograd_block_size(in_channels, out_channels, n, outs):
    """The output block size m of Winograd's F(m x m, 3x3) that a 3x3 stride-1 layer with n
    images and output map `outs` runs faster with on this process's cores (4 or 2), or None
    where neither runs faster or its tiles exceed the memory bound."""
    channels = min(in_channels, out_channels)
    blocks, blocks4 = _winograd.blocks(n, outs, 2), _winograd.blocks(n, outs, 4)
    least = (_WINOGRAD_BLOCKS_WIDE if channels >= _WINOGRAD_CHANNELS_WIDE and _cores() == 1
             else _WINOGRAD_BLOCKS)
    if not _winograd_fits(in_channels, out_channels, outs, blocks, least, tile_positions=16):
        return None
    if blocks4 >= _WINOGRAD4_BLOCKS:
        return 4
    padded = _winograd.blocks(1, outs, 2) * 4  # pixels the 2x2 blocks cover, per image
    if math.prod(outs) < _WINOGRAD2_FILL * padded:
        return None
    if _cores() == 1:
        return 2
    wide = channels >= _WINOGRAD_CHANNELS_MULTICORE
    large = channels * blocks >= (_WINOGRAD_WORK_MULTICORE if wide else _WINOGRAD_WORK_NARROW)
    return 2 if large else None


def live_taps(spatial, kernel, stride, padding, dilation):
    """Per spatial axis, the kernel offsets [first, last + 1) that read at least one input
    element rather than padding ((0, k) where none does: the output is zeros, left to the
    convolution as it is), or None where no axis has an offset to crop.

    A 3x3 layer with padding 1 on a 1x1 map (ResNet's last stage at 32x32 input, GoogLeNet's
    last inceptions) reads real data only through its centre offset: the other eight multiply
    padding, 8/9 of its products. Offsets are cropped only at the ends of each axis (those
    between two live ones stay, reading zeros where they read padding)."""
    ranges = []
    for size, k, s, d, (lo, hi) in zip(spatial, kernel, stride, dilation, padding):
        (out,) = _out_sizes((size + lo + hi,), (k,), (s,), (d,))
        live = []
        for i in range(k):
            # offset i reads input index o*s + i*d - lo for the outputs o in [0, out); the
            # first output that reads index 0 or later reads the smallest such index
            first = max(0, -(-(lo - i * d) // s))
            if first < out and first * s + i * d - lo < size:
                live.append(i)
        ranges.append((live[0], live[-1] + 1) if live else (0, k))
    if all(r == (0, k) for r, k in zip(ranges, kernel)):
        return None
    return ranges


def crop_dead_taps(x, w, stride, padding, dilation):
    """x (N, C, *S) and w (O, I, *K) with the kernel offsets that read only padding cropped
    away (`live_taps`), and the padding that keeps every output where it was: the same
    convolution with fewer products. Input rows no remaining offset reads are sliced off
    (negative padding). Exact: the cropped offsets' gradients are zeros, as before."""
    spatial, kernel = x.shape[2:], w.shape[2:]
    ranges = live_taps(spatial, kernel, stride, padding, dilation)
    if ranges is None:
        return x, w, padding
    w = _crop_kernel(w, tuple(ranges))
    pairs, start, stop = [], [], []
    for size, k, (a, b), s, d, (lo, hi) in zip(spatial, kernel, ranges, stride, dilation,
                                                padding):
        (out,) = _out_sizes((size + lo + hi,), (k,), (s,), (d,))
        new_lo = lo - a * d
        new_hi = (out - 1) * s + d * (b - a - 1) + 1 - size - new_lo
        start.append(max(0, -new_lo))
        stop.append(size - max(0, -new_hi))
        pairs.append((max(0, new_lo), max(0, new_hi)))
    x = jax.lax.slice(x, (0, 0, *start), (*x.shape[:2], *stop))
    return x, w, tuple(pairs)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _crop_kernel(w, ranges):
    """w (O, I, *K) with each kernel axis sliced to its [first, last) offsets."""
    return w[(slice(None), slice(None), *(slice(a, b) for a, b in ranges))]


@_crop_kernel.defjvp
def _crop_kernel_jvp(ranges, primals, tangents):
    """An axis cropped to one offset takes that offset's tangent as a sum against a one-hot
    mask, whose transpose (the gradient) is a broadcast times the mask: XLA's CPU backend fuses
    that into the optimizer's update, while the slice's transpose, a pad, runs as a loop of its
    own that writes the whole (mostly zero) gradient first. Other axes are sliced."""
    (w,), (dw,) = primals, tangents
    kernel = w.shape[2:]
    single = [i for i, ((a, b), k) in enumerate(zip(ranges, kernel)) if b - a == 1 < k]
    dw = dw[(slice(None), slice(None),
             *(slice(None) if i in single else slice(a, b) for i, (a, b) in enumerate(ranges)))]
    if single:
        mask = np.ones((1, 1) + dw.shape[2:], bool)
        for i in single:
            shape = [1] * dw.ndim
            shape[2 + i] = kernel[i]
            mask = mask & (np.arange(kernel[i]) == ranges[i][0]).reshape(shape)
        dw = jnp.sum(dw * mask.astype(dw.dtype), axis=tuple(2 + i for i in single), keepdims=True)
    return _crop_kernel(w, ranges), dw


def _channels_first(geometry: Plan, lowering: str) -> Plan:
    """Every pass through one channels-first lowering: on the model's own (N, C, *S)
    activations, with no transposes around it."""
    return dataclasses.replace(geometry, forward=lowering, input_grad=lowering,
                               weight_grad=lowering, channels_last=False)


def _padded_views(x, kernel, p: Plan):
    """One strided slice of the zero-padded x per kernel offset, and the output sizes."""
    lead = 1 if p.channels_last else 2
    spatial = [(lo, hi, 0) for lo, hi in p.padding]
    none = [(0, 0, 0)]
    x = jax.lax.pad(x, jnp.zeros((), x.dtype),
                    none + spatial + none if p.channels_last else none * 2 + spatial)
    outs = _out_sizes(x.shape[lead:lead + len(kernel)], kernel, p.stride, p.dilation)
    return list(window_views(x, lead, kernel, p.dilation, p.stride, outs,
                             trail=int(p.channels_last)))


def _xla(x, w, p: Plan):
    letters = "DHW"[3 - (x.ndim - 2):]
    return jax.lax.conv_general_dilated(
        x, w, p.stride, p.padding, rhs_dilation=p.dilation, feature_group_count=p.groups,
        dimension_numbers=("N" + letters + "C", "OI" + letters, "N" + letters + "C"))


def _patches(x, w, p: Plan):
    # Channel-major, kernel offset minor: the order of w (O, C, *K) flattened to (O, C*K).
    # Stacked per kernel axis (`stack_windows`): one stack of all the offsets along the
    # minor axis is a concatenate XLA emits operand by operand, each pass writing every
    # k*k-th element of the whole patch matrix; past the core's cache that ran 11x slower
    # ((2, 256, 28x28), 3x3 stride 2: 7.2 against 0.65 ms, Intel Xeon VM, one core).
    views = _padded_views(x, w.shape[2:], p)
    stacked = stack_windows(views, w.shape[2:], views[0].ndim)  # (N, *out, C, *K)
    patch_matrix = stacked.reshape(*stacked.shape[:x.ndim - 1], -1)
    y = jax.lax.dot_general(patch_matrix, w.reshape(w.shape[0], -1),
                            (((patch_matrix.ndim - 1,), (1,)), ((), ())),
                            preferred_element_type=accumulation_dtype(x.dtype))
    return y.astype(x.dtype)


def _patch_columns(x, kernel, p: Plan):
    """Channels-first x (N, C, *S) -> (N, C*k*k, pixels) and the output sizes: each image's
    patch matrix, rows in the order of w (O, C, *K) flattened (channel-major)."""
    views = _padded_views(x, kernel, p)
    stacked = stack_windows(views, kernel, 2) if len(views) > 1 else views[0]
    outs = views[0].shape[2:]
    return stacked.reshape(x.shape[0], -1, math.prod(outs)), outs


def _image_matmul(x, w, p: Plan):
    columns, outs = _patch_columns(x, w.shape[2:], p)
    weights = w.reshape(w.shape[0], -1)  # (O, C*k*k)
    # 1x1 expanding layers (MobileNet's) and small maps keep the plain form: see
    # _per_image_product_jvp and _TRANSPOSED_PIXELS
    transposed = weights.shape[1] >= weights.shape[0] and columns.shape[2] >= _TRANSPOSED_PIXELS
    y = _per_image_product(weights, columns, transposed)
    return y.astype(x.dtype).reshape(x.shape[0], w.shape[0], *outs)


def _weights_times_columns(w, columns, transposed: bool, copies: bool = False):
    """(O, K) weights times each image's (K, P) columns -> (N, O, P), channels-first. The
    weights broadcast over images, so that the image is a batch axis of the product (the
    broadcast's gradient is a sum over images); `copies` stacks one copy per image instead,
    whose gradient is adds of slices (_weight_tangent). `transposed` passes them as (K, O):
    XLA's CPU backend runs a product whose left operand contracts its minor axis in YNNPACK
    and the other form in Eigen, and the two forms' speeds differ per pass (below)."""
    n = columns.shape[0]
    lhs, contract = (w.T, 1) if transposed else (w, 2)
    spread = jnp.stack([lhs] * n) if copies else jnp.broadcast_to(lhs, (n, *lhs.shape))
    return jax.lax.dot_general(spread, columns, (((contract,), (1,)), ((0,), (0,))),
                               preferred_element_type=accumulation_dtype(columns.dtype))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _per_image_product(w, columns, transposed: bool):
    return _weights_times_columns(w, columns, transposed)


@functools.partial(_per_image_product.defjvp, symbolic_zeros=True)
def _per_image_product_jvp(transposed, primals, tangents):
    """The tangent is written so that reverse mode's transposes take the faster form for
    each pass. Measured per pass, (64,576)x(576,3136) per image (ResNet's 3x3 layers at
    56x56), one EPYC Zen 4 core (docs/design.md): with the weights transposed the forward
    took 28% less time and the weight gradient (then columns times dy) 31% less, the input
    gradient 17% more. The weight gradient's form wins only while the patch rows (C*k*k)
    are at least the output channels: on MobileNet's 1x1 expanding layers (16 -> 96 at
    112x112) it took twice the time, so those keep the plain product throughout. A JVP
    rather than a custom VJP keeps forward mode and higher derivatives. Symbolic zeros: no
    product for the data's zero tangent (a first layer). The weight's term is
    _weight_tangent's: how its transpose sums over the images depends on the core count."""
    w, columns = primals
    dw, dcolumns = tangents
    y = _weights_times_columns(w, columns, transposed)
    terms = []
    if type(dcolumns) is not SymbolicZero:
        # the input gradient: on large maps with the weights as they are (Eigen's product);
        # on small ones transposed (YNNPACK's), which ran it 10-30% faster (2026-12-06,
        # Intel Xeon VM, (2, 64, 14x14) -> 384: 0.218 against 0.248 ms one core, 0.266 against
        # 0.304 two) and lost on 28x28 and larger maps on one core (docs/design.md, "The
        # weight gradient's sum over images on small maps")
        small_map = columns.shape[2] < _TRANSPOSED_PIXELS
        terms.append(_weights_times_columns(w, dcolumns, transposed=small_map))
    if type(dw) is not SymbolicZero:
        terms.append(_weight_tangent(dw, columns, transposed))
    return y, sum(terms[1:], terms[0]) if terms else jnp.zeros_like(y)


def _weight_tangent(dw, columns, transposed: bool):
    """dw (O, K) times each image's columns, written so that reverse mode's sum of the
    per-image weight gradients over the images is fast. The weights broadcast over images
    transpose to a reduce over the leading axis, which XLA fuses with the product into one
    YNNPACK call; stacked, one copy per image, they transpose to a batched product and adds
    of its slices. The stack is in (O, K) order, as w is: the transposed form's (K, O) slices
    would be added and transposed in one loop that reads every slice across its rows.
    Measured per weight gradient (_SLICED_SUM_WEIGHTS, _SLICED_SUM_IMAGES): the stack won in
    the plain form on one core (on 14x14 maps at batch 2 in half the time: 64 -> 384, 0.14
    against 0.34 ms) and on more cores with large weights or few images; the reduce won with
    the transposed form on one core and with small weights over more images on two."""
    large = dw.size >= _SLICED_SUM_WEIGHTS
    if transposed and (_cores() == 1 or not large):
        return _weights_times_columns(dw, columns, transposed=True)
    if _cores() > 1 and not large and columns.shape[0] > _SLICED_SUM_IMAGES:
        return _weights_times_columns(dw, columns, transposed=False)
    return _weights_times_columns(dw, columns, transposed=False, copies=True)


def _cores() -> int:
    """The cores this process may run on: XLA's CPU client sizes its thread pool by them."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _matmul(x, w, p: Plan):
    columns, outs = _patch_columns(x, w.shape[2:], p)
    weights = w.reshape(w.shape[0], -1)
    forward_per_image = _cores() == 1 and columns.shape[2] >= _IMAGE_FORWARD_PIXELS
    weight_grad_per_image = columns.shape[2] >= _IMAGE_WEIGHT_GRAD_PIXELS
    y = _matmul_product(weights, columns, forward_per_image, weight_grad_per_image)
    return y.astype(x.dtype).reshape(x.shape[0], w.shape[0], *outs)


def _folded_product(w, columns):
    """(O, K) weights times (N, K, P) columns as one product over all images, (O, N*P), then
    moved to (N, O, P)."""
    y = jax.lax.dot_general(w, columns, (((1,), (1,)), ((), ())),
                            preferred_element_type=accumulation_dtype(columns.dtype))
    return jnp.moveaxis(y, 0, 1)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _matmul_product(w, columns, forward_per_image: bool, weight_grad_per_image: bool):
    """(O, K) weights times (N, K, P) columns -> (N, O, P), each pass in its own form: the
    forward pass one product per image, written straight into the channels-first output
    (_IMAGE_FORWARD_PIXELS), or one product over all images; the input gradient one product
    over all images; the weight gradient one product per image summed by adds of slices
    (_IMAGE_WEIGHT_GRAD_PIXELS), or one product over all images. A JVP rather than a custom VJP
    keeps forward mode and higher derivatives."""
    if forward_per_image:
        return _weights_times_columns(w, columns, transposed=False)
    return _folded_product(w, columns)


@functools.partial(_matmul_product.defjvp, symbolic_zeros=True)
def _matmul_product_jvp(forward_per_image, weight_grad_per_image, primals, tangents):
    (w, columns), (dw, dcolumns) = primals, tangents
    terms = []
    if type(dcolumns) is not SymbolicZero:
        terms.append(_folded_product(w, dcolumns))
    if type(dw) is not SymbolicZero:
        terms.append(_weight_tangent(dw, columns, transposed=False) if weight_grad_per_image
                     else _folded_product(dw, columns))
    y = _matmul_product(w, columns, forward_per_image, weight_grad_per_image)
    return y, sum(terms[1:], terms[0]) if terms else jnp.zeros_like(y)


def _whole_map(x, w, p: Plan):
    """Channels-first x (N, C, *S) as (N, C*S) rows times the (O*out, C*S) map matrix: for a
    tiny input map each output pixel reads every input pixel through one kernel offset (a
    3x3 layer on a 2x2 map: 4 of its 9 offsets per output), so this is 2.25x fewer products
    than patches, which multiply the padding too. Stride 1, no dilation."""
    spatial = x.shape[2:]
    outs = _out_sizes([s + lo + hi for s, (lo, hi) in zip(spatial, p.padding)], w.shape[2:],
                      p.stride, p.dilation)
    y = jax.lax.dot_general(x.reshape(x.shape[0], -1), _map_matrix(w, spatial, outs, p.padding),
                            (((1,), (1,)), ((), ())),
                            preferred_element_type=accumulation_dtype(x.dtype))
    return y.astype(x.dtype).reshape(x.shape[0], w.shape[0], *outs)


def _map_matrix(w, spatial, outs, padding):
    """(O, C, *K) -> (O*out pixels, C*in pixels) for a stride-1 convolution: entry
    [(o, q), (c, r)] is w[o, c, r + lo - q] (per spatial axis), zero where that offset lies
    outside the kernel. One slice of the zero-padded kernel per output pixel, stacked: its
    transpose (the weight gradient) is adds of padded slices, which XLA fuses into the
    optimizer's update."""
    kernel = w.shape[2:]
    pads = [(max(0, out - 1 - lo), max(0, lo + size - k))
            for size, out, (lo, _), k in zip(spatial, outs, padding, kernel)]
    w_padded = jax.lax.pad(w, jnp.zeros((), w.dtype),
                           [(0, 0, 0)] * 2 + [(a, b, 0) for a, b in pads])
    blocks = []
    for q in itertools.product(*map(range, outs)):
        start = [lo - i + a for i, (lo, _), (a, _) in zip(q, padding, pads)]
        blocks.append(jax.lax.slice(w_padded, (0, 0, *start),
                                    (*w.shape[:2], *(b + n for b, n in zip(start, spatial)))))
    return jnp.stack(blocks, axis=1).reshape(w.shape[0] * len(blocks), -1)


def _shifts(x, w, p: Plan):
    acc = accumulation_dtype(x.dtype)
    taps = w.reshape(w.shape[0], -1).astype(acc)  # (O, offsets): small
    total = None
    for view, tap in zip(_shifted_views(x, w.shape, p), taps.T):
        term = view.astype(acc) * _per_channel(tap, x.ndim, p)
        total = term if total is None else total + term
    return total.astype(x.dtype)


def _shifted_views(x, w_shape, p: Plan):
    """`_padded_views`, each repeated along channels to match the output's channels: output
    channel g*m + j reads input channel g (a channel multiplier m > 1)."""
    axis = -1 if p.channels_last else 1
    multiplier = w_shape[0] // x.shape[axis]
    for view in _padded_views(x, w_shape[2:], p):
        yield view if multiplier == 1 else jnp.repeat(view, multiplier, axis=axis)


def _per_channel(v, ndim, p: Plan):
    """A per-channel vector shaped to broadcast against an activation in p's layout."""
    return v if p.channels_last else v.reshape((-1,) + (1,) * (ndim - 2))


def _shifts_weight_grad(x, dy, p: Plan, w_shape):
    """dw[o, offset]: the sum over batch and pixels of that offset's view times dy, as ONE
    reduce with an operand per offset, which XLA emits as a single pass over x and dy.
    (Autodiff of `_shifts` gives one reduction per offset, each over its materialised view:
    2-3x slower.)"""
    acc = accumulation_dtype(x.dtype)
    products = [view.astype(acc) * dy.astype(acc) for view in _shifted_views(x, w_shape, p)]
    keep = x.ndim - 1 if p.channels_last else 1
    sums = jax.lax.reduce(products, [jnp.zeros((), acc)] * len(products),
                          lambda a, b: [u + v for u, v in zip(a, b)],
                          tuple(d for d in range(x.ndim) if d != keep))
    return jnp.stack(sums, axis=-1).reshape(w_shape).astype(x.dtype)


def _shifts_input_grad(dy, w, p: Plan, x_shape):
    """dx of `_shifts`, one stride phase at a time, from contiguous slices of dy.

    Input pixel r = s*q + a (phase a) receives dy[q + (a + lo - i*d) / s] * w[i] from each
    kernel offset i for which that division is exact (stride 2, 3 taps: 1 or 2 per phase).
    Each phase is computed on ceil(size / s) pixels; one transpose interleaves the phases
    and a slice crops. (Autodiff transposes the strided slices into pads with zeros between
    pixels, which XLA's CPU loop evaluated 3-4x slower; with stride 1 this is the usual
    sum of shifted slices with the flipped kernel.)"""
    lead, n = (1 if p.channels_last else 2), len(p.stride)
    dtype, acc = dy.dtype, accumulation_dtype(dy.dtype)
    taps = w.reshape(w.shape[0], -1).astype(acc)
    cells = [-(-size // s) for size, s in zip(x_shape[lead:lead + n], p.stride)]
    # Per axis, per phase: (kernel offset, shift into dy) of every offset that reaches it.
    reach = [[[(i, (a + lo - i * d) // s) for i in range(k) if (a + lo - i * d) % s == 0]
              for a in range(s)]
             for k, s, d, (lo, _) in zip(w.shape[2:], p.stride, p.dilation, p.padding)]
    shifts = [[sh for phase in axis_reach for _, sh in phase] for axis_reach in reach]
    below = [max([0] + [-sh for sh in axis_shifts]) for axis_shifts in shifts]
    above = [max([0] + [sh + cell - out for sh in axis_shifts])
             for axis_shifts, cell, out in zip(shifts, cells, dy.shape[lead:lead + n])]
    config = [(0, 0, 0)] * dy.ndim
    config[lead:lead + n] = [(b, a, 0) for b, a in zip(below, above)]
    dy = jax.lax.pad(dy.astype(acc), jnp.zeros((), acc), config)
    phase_shape = list(dy.shape)
    phase_shape[lead:lead + n] = cells
    phases = []
    for phase in itertools.product(*reach):  # per axis, the offsets reaching this phase
        total = jnp.zeros(phase_shape, acc)
        for combo in itertools.product(*phase):
            start = [0] * dy.ndim
            start[lead:lead + n] = [sh + b for (_, sh), b in zip(combo, below)]
            view = jax.lax.slice(dy, start, [s + size for s, size in zip(start, phase_shape)])
            tap = taps[:, np.ravel_multi_index([i for i, _ in combo], w.shape[2:])]
            total = total + view * _per_channel(tap, dy.ndim, p)
        phases.append(_fold_multiplier(total, x_shape, p))
    full = interleave_phases(phases, lead, p.stride)
    return jax.lax.slice(full, [0] * full.ndim, x_shape).astype(dtype)


def _fold_multiplier(a, x_shape, p: Plan):
    """Sum the m output channels g*m + j (j < m) that read input channel g."""
    axis = a.ndim - 1 if p.channels_last else 1
    c = x_shape[axis]
    if a.shape[axis] == c:
        return a
    return a.reshape(*a.shape[:axis], c, -1, *a.shape[axis + 1:]).sum(axis + 1)


def _winograd_lowering(m):
    """The lowering by Winograd's F(m x m, r x r), r the kernel's size."""
    def lower(x, w, p: Plan):
        return _winograd.conv(x, w, p.padding, m, winograd_chains())
    return lower


def winograd_chains() -> int:
    """How many independent chains `_winograd.conv` splits its tile positions into here."""
    return _WINOGRAD_GROUPS_MULTICORE if _cores() > 1 else 1


_LOWERINGS = {"xla": _xla, "patches": _patches, "shifts": _shifts,
              "image_matmul": _image_matmul, "matmul": _matmul, "whole_map": _whole_map,
              "winograd": _winograd_lowering(2), "winograd4": _winograd_lowering(4)}


def conv(x, w, p: Plan):
    """The convolution of x (N, *S, C) with w (O, C/groups, *K), lowered as `p` says."""
    if p.forward == p.input_grad == p.weight_grad != "shifts":
        return _LOWERINGS[p.forward](x, w, p)
    return _conv_split(x, w, p)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _conv_split(x, w, p):
    return _LOWERINGS[p.forward](x, w, p)


def _split_forward(x, w, p):
    return _LOWERINGS[p.forward](x, w, p), (x, w)


def _split_backward(p, residuals, dy):
    x, w = residuals
    if p.input_grad == "shifts":
        dx = _shifts_input_grad(dy, w, p, x.shape)
    else:
        (dx,) = jax.linear_transpose(lambda a: _LOWERINGS[p.input_grad](a, w, p), x)(dy)
    if p.weight_grad == "shifts":
        dw = _shifts_weight_grad(x, dy, p, w.shape)
    else:
        (dw,) = jax.linear_transpose(lambda b: _LOWERINGS[p.weight_grad](x, b, p), w)(dy)
    return dx, dw


_conv_split.defvjp(_split_forward, _split_backward)


def patches(x, kernel, stride, dilation):
    """(N, *S, C) -> (N, *out, prod(kernel) * C): for every output position, its window's
    elements, kernel-offset-major then channel (the row order of w (*K, C, O) reshaped to
    (-1, O)). One strided slice per kernel offset, stacked."""
    outs = _out_sizes(x.shape[1:-1], kernel, stride, dilation)
    views = list(window_views(x, 1, kernel, dilation, stride, outs, trail=1))
    stacked = stack_windows(views, kernel, x.ndim - 1)  # (N, *out, *K, C)
    return stacked.reshape(*stacked.shape[:x.ndim - 1], -1)


def _flat(a):
    return a.reshape(-1, a.shape[-1])


def conv_transpose(x, w, stride, dilation, spatial):
    """The adjoint, with respect to its input, of the valid convolution of an image
    (N, *spatial, C) with w (*K, C, O): x (N, *out, O) -> (N, *spatial, C).

    XLA runs a transposed convolution as a convolution over an input dilated with zeros;
    on CPU that measured 4-5x slower than this: one matrix product spreads every input
    pixel into its k*k window, then col2im (the transpose of `patches`) sums the windows
    back into the image. Only `groups == 1` comes here; `_conv.py` decides when."""
    kernel, c = w.shape[:-2], w.shape[-2]
    # (N*out, O) @ (O, K*C): each input pixel's contribution to its whole window ...
    windows = _flat(x) @ jnp.moveaxis(w, -1, 0).reshape(w.shape[-1], -1)
    windows = windows.reshape(*x.shape[:-1], math.prod(kernel) * c)
    # ... summed back into the image by the transpose of `patches` (pads and adds, fused).
    image = jax.ShapeDtypeStruct((x.shape[0], *spatial, c), windows.dtype)
    (y,) = jax.linear_transpose(lambda im: patches(im, kernel, stride, dilation), image)(windows)
    return y
