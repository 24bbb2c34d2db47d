"""The key of a random functional op: the caller's `key=`, else the global stream (eager only)."""

from jaxdl._random import next_key
from jaxdl._tracing import is_traced


def fresh_key(key, input, what):
    if key is not None:
        return key
    if is_traced(input):
        raise ValueError(
            f"F.{what} inside a traced function needs key=...: the global key stream would be "
            f"frozen into the compiled code. Pass a key, or use the module form (e.g. nn.Dropout, "
            f"nn.AlphaDropout, nn.FractionalMaxPool2d), whose key stream is threaded through dl.jit."
        )
    return next_key()
