"""Optional dependencies: imported when first needed, with an error that names the extra.

`import jaxdl` needs only jax, optax and numpy; torch (the `torch` extra) and grain,
orbax, scikit-learn, tqdm and matplotlib (the `data` extra) load inside the
functions that use them, through `require`.
"""

import importlib


def require(module: str, extra: str, purpose: str):
    """`import module`, or ImportError saying which jaxdl extra installs it.

    Only a missing `module` (or a parent package of it) is translated; an error
    raised inside an installed package propagates unchanged.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        parts = module.split(".")
        if e.name not in {".".join(parts[:i]) for i in range(1, len(parts) + 1)}:
            raise
        raise ModuleNotFoundError(
            f"{purpose} needs {parts[0]}, which is not installed: pip install 'jaxdl[{extra}]'",
            name=e.name,
        ) from e
