"""`dl.backends.cpu`: how convolutions are lowered on XLA's CPU backend.

`benchmark` (default True), like `torch.backends.cudnn.benchmark`: each
convolution shape runs the lowering measured fastest for it, chosen separately for
the forward pass, the input gradient and the weight gradient (XLA's convolution, a
matrix product over patches, or for depthwise convolutions a sum of shifted slices;
see docs/design.md), after cropping kernel offsets that read only padding. False runs
XLA's convolution everywhere, as written. `dl.jit` recompiles when it changes.
`choices()` lists what each convolution traced so far runs.

`heap_retained`: whether importing jaxdl told glibc to keep freed memory in the heap, so
that a compiled step does not page its temporary buffers in again at every call (see
jaxdl/_heap.py; JAXDL_RETAIN_HEAP=0 before the import leaves malloc as it is).
`inline_dispatch`: whether importing jaxdl turned jax's async CPU dispatch off, so that a
single-device step runs on the thread that calls it and malloc keeps one arena per thread
(JAX_CPU_ENABLE_ASYNC_DISPATCH set before the import, or jax used before it, keeps jax's
dispatch and one arena shared by all threads).
"""

from jaxdl import _heap, _trace_state

heap_retained = _heap.RETAINED
inline_dispatch = _heap.INLINE_DISPATCH

benchmark = True
_trace_state.poll("cpu_benchmark", lambda: benchmark)  # dl.jit compiles again when it changes

_choices: dict = {}


def choices() -> list[dict]:
    """One entry per distinct convolution traced in this process (input (N, C, *S) and weight
    (O, C/groups, *K) shapes as the layer has them, geometry and dtype) with the lowering of
    each pass and the kernel that runs (smaller than the weight's where offsets that read
    only padding were cropped)."""
    return [{**dict(key), **lowerings} for key, lowerings in _choices.items()]


def _record(key: dict, lowerings: dict):
    _choices[tuple(key.items())] = lowerings

