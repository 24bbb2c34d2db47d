"""The one place where models register, by name, for `jaxdl train` and `get_model`."""

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """A registered model: its jaxdl builder and, optionally, a PyTorch twin builder.

    `torch_twin(**kwargs)` returns a `torch.nn.Module` with the same state_dict
    keys and shapes as `build(**kwargs)`, so weights copy across one to one.
    `datasets` names the `jaxdl train --data` sets whose inputs the default build takes.
    """

    name: str
    build: Callable
    torch_twin: Callable | None = None
    description: str = ""
    datasets: tuple[str, ...] = ()


_MODELS: dict[str, ModelEntry] = {}


def register_model(name: str, *, torch_twin: Callable | None = None, description: str = "",
                   datasets: tuple[str, ...] = ()):
    """Decorator: registers `build(**kwargs) -> nn.Module` under `name`."""

    def decorate(build):
        if name in _MODELS:
            raise ValueError(f"model '{name}' is already registered")
        _MODELS[name] = ModelEntry(name, build, torch_twin, description, tuple(datasets))
        return build

    return decorate


def list_models() -> list[str]:
    """Names of all registered models, sorted."""
    return sorted(_MODELS)


def models_for(dataset: str) -> list[str]:
    """Names of the models whose default build takes `dataset`'s inputs, sorted."""
    return sorted(name for name, entry in _MODELS.items() if dataset in entry.datasets)


def model_entry(name: str) -> ModelEntry:
    """The registry entry for `name`; an unknown name lists the valid ones."""
    if name not in _MODELS:
        raise KeyError(f"unknown model '{name}'; valid models: {', '.join(list_models())}")
    return _MODELS[name]


def get_model(name: str, **kwargs):
    """Builds the registered model `name` (keyword arguments go to its builder)."""
    return model_entry(name).build(**kwargs)
