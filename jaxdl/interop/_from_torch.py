"""`from_torch`: the jaxdl twin of a torch module built from standard layers, weights copied.

Most torch layers keep their constructor arguments as attributes of the same
name (`Linear.in_features`, `Conv2d.padding_mode`, `LSTM.bidirectional`), and
jaxdl's layers take PyTorch's arguments: so one generic rule converts them,
reading each argument of the jaxdl constructor from the torch attribute of that
name. Containers, MultiheadAttention and the Transformer layers, whose
arguments are not stored verbatim, have their own converters. A torch option
that jaxdl's constructor lacks is refused unless it holds torch's default, so a
conversion never silently changes what the model computes.

A module with its own forward is captured with torch.export instead
(`_export.py`; torch.fx symbolic tracing where export fails, `_fx.py`); its stock
layers still convert here.

torch is imported only when `from_torch` is called.
"""

import collections
import inspect

import jax.numpy as jnp

from jaxdl import nn
from jaxdl._extras import require
from jaxdl._module import to_numpy

# jaxdl constructor arguments never read from the torch module.
_NOT_FROM_TORCH = {"device", "dtype", "key", "_weight", "_freeze", "process_group", "axis_name"}


def _describe(path, module):
    return f"{path or '<root>'} ({type(module).__module__}.{type(module).__name__})"


def _is_standard(torch, module) -> bool:
    """A class of torch.nn itself, not a user's subclass."""
    name = type(module).__name__
    return getattr(torch.nn, name, None) is type(module)


def _constructor_params(cls):
    try:
        params = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p for p in params if p.name != "self"
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _argument(torch, value, name):
    """A torch attribute as a jaxdl constructor argument."""
    if name == "bias" and (value is None or isinstance(value, torch.Tensor)):
        return value is not None  # torch stores the bias Parameter, the constructor takes a bool
    if isinstance(value, torch.Tensor):
        return jnp.asarray(to_numpy(value))  # e.g. a loss's class weights
    return value


def _generic(torch, module, path, convert):
    """Construct `jaxdl.nn.<same name>` from the torch attributes named like its arguments."""
    cls = getattr(nn, type(module).__name__, None)
    if cls is None:
        raise NotImplementedError(
            f"from_torch: {_describe(path, module)} has no jaxdl counterpart yet")
    ours = {p.name for p in _constructor_params(cls)}
    for p in _constructor_params(type(module)):
        if p.name in ours or p.name in _NOT_FROM_TORCH or p.default is p.empty:
            continue
        value = _argument(torch, getattr(module, p.name, p.default), p.name)
        if value is not p.default and value != p.default:
            raise NotImplementedError(
                f"from_torch: {_describe(path, module)} uses {p.name}={value!r}, "
                f"which jaxdl's {cls.__name__} does not support")
    kwargs = {name: _argument(torch, getattr(module, name), name)
              for name in ours - _NOT_FROM_TORCH if hasattr(module, name)}
    return cls(**kwargs)


def _sequential(torch, module, path, convert):
    return nn.Sequential(collections.OrderedDict(
        (name, convert(child, _join(path, name))) for name, child in module.named_children()))


def _module_list(torch, module, path, convert):
    return nn.ModuleList([convert(child, _join(path, name))
                          for name, child in module.named_children()])


def _module_dict(torch, module, path, convert):
    return nn.ModuleDict({name: convert(child, _join(path, name))
                          for name, child in module.named_children()})


def _multihead_attention(torch, module, path, convert):
    return nn.MultiheadAttention(
        module.embed_dim, module.num_heads, dropout=module.dropout,
        bias=module.in_proj_bias is not None, add_bias_kv=module.bias_k is not None,
        add_zero_attn=module.add_zero_attn, kdim=module.kdim, vdim=module.vdim,
        batch_first=module.batch_first)


def _activation(torch, activation, path, convert):
    functional = torch.nn.functional
    if activation is functional.relu:
        return "relu"
    if activation is functional.gelu:
        return "gelu"
    if isinstance(activation, torch.nn.Module):
        return convert(activation, _join(path, "activation"))
    raise NotImplementedError(f"from_torch: {path} uses activation {activation!r}; only "
                              "F.relu, F.gelu or a convertible torch module are supported")


def _transformer_layer(torch, module, path, convert):
    cls = getattr(nn, type(module).__name__)
    return cls(module.self_attn.embed_dim, module.self_attn.num_heads,
               dim_feedforward=module.linear1.out_features, dropout=module.dropout.p,
               activation=_activation(torch, module.activation, path, convert),
               layer_norm_eps=module.norm1.eps, batch_first=module.self_attn.batch_first,
               norm_first=module.norm_first, bias=module.linear1.bias is not None)


def _transformer_stack(torch, module, path, convert):
    norm = None if module.norm is None else convert(module.norm, _join(path, "norm"))
    # The stack clones its first layer; load_state_dict later gives each copy its own weights.
    first = convert(module.layers[0], _join(path, "layers.0"))
    cls = getattr(nn, type(module).__name__)
    return cls(first, len(module.layers), norm=norm)


def _pairwise_distance(torch, module, path, convert):
    return nn.PairwiseDistance(module.norm, module.eps, module.keepdim)  # torch stores p as `norm`


def _triplet_with_distance(torch, module, path, convert):
    """torch keeps its distance as a child module (PairwiseDistance() by default)."""
    distance = module.distance_function
    if isinstance(distance, torch.nn.Module):
        distance = convert(distance, _join(path, "distance_function"))
    elif distance is not None and distance is not torch.nn.functional.pairwise_distance:
        raise NotImplementedError(
            f"from_torch: {_describe(path, module)} uses distance_function={distance!r}, a "
            "Python callable that cannot be converted; build nn.TripletMarginWithDistanceLoss "
            "with its jaxdl equivalent by hand")
    return nn.TripletMarginWithDistanceLoss(distance_function=distance, margin=module.margin,
                                            swap=module.swap, reduction=module.reduction)


_SPECIAL = {
    "PairwiseDistance": _pairwise_distance,
    "TripletMarginWithDistanceLoss": _triplet_with_distance,
    "Sequential": _sequential,
    "ModuleList": _module_list,
    "ModuleDict": _module_dict,
    "MultiheadAttention": _multihead_attention,
    "TransformerEncoderLayer": _transformer_layer,
    "TransformerDecoderLayer": _transformer_layer,
    "TransformerEncoder": _transformer_stack,
    "TransformerDecoder": _transformer_stack,
}


def _join(prefix, name):
    return f"{prefix}.{name}" if prefix else name


def _stock_converter(torch):
    """`convert(module, path)`: the jaxdl layer for a tree of stock torch layers."""

    def convert(module, path):
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"from_torch expects a torch.nn.Module, got {type(module).__name__}")
        if not _is_standard(torch, module):
            raise _CustomModule(
                f"from_torch: {_describe(path, module)} is a custom Module with its own "
                "forward: pass example_inputs (a tuple of torch tensors) so that it can be "
                "captured with torch.export, or write its jaxdl twin by hand and call "
                "twin.load_state_dict(torch_module.state_dict()).")
        converter = _SPECIAL.get(type(module).__name__, _generic)
        try:
            return converter(torch, module, path, convert)
        except NotImplementedError as err:  # e.g. an option the jaxdl constructor refuses
            if str(err).startswith("from_torch"):
                raise
            raise NotImplementedError(f"from_torch: {_describe(path, module)}: {err}") from None

    return convert


class _CustomModule(NotImplementedError):
    """A module with its own forward inside the tree: it needs torch.export."""


def from_torch(torch_module, example_inputs=None, *, dynamic_shapes="batch"):
    """Build the jaxdl twin of a torch module, weights copied.

    A tree of standard `torch.nn` layers and containers converts layer by layer. Any
    other module (its own `forward`) is captured with `torch.export` on
    `example_inputs` (or, where export refuses it, `torch.fx` symbolic tracing), in
    training and, if its code reads the mode, in evaluation mode, and replayed with
    jaxdl and JAX operations (`jaxdl/interop/_aten.py`, `_fx.py`); its stock layers
    inside become jaxdl layers. See docs/interop.md.

    Arguments:
        torch_module: any `torch.nn.Module`.
        example_inputs: a tuple of torch tensors (the positional arguments of its
            forward), needed only for a module with its own forward. Shapes other than
            these are accepted where `dynamic_shapes` allows them.
        dynamic_shapes: "batch" (default: axis 0 of every input may vary, where the
            forward allows it; torch.export's `Dim.AUTO`), None (every shape fixed), or
            torch.export's `dynamic_shapes` argument itself.

    Returns:
        The jaxdl module with torch's state_dict keys, weights, buffers, train/eval
        modes and frozen (requires_grad=False) parameters.

    Raises:
        NotImplementedError: naming the path and type of a stock layer or option jaxdl
            lacks; for a captured forward, naming the aten operator without an entry in
            the table and the line of the forward it came from; or when neither
            torch.export nor torch.fx can capture the forward (data-dependent control
            flow or shapes), giving both causes.
    """
    torch = require("torch", "torch", "dl.interop.from_torch")

    convert = _stock_converter(torch)
    try:
        twin = convert(torch_module, "")
    except _CustomModule:
        if example_inputs is None:
            raise
        from jaxdl.interop._export import convert_exported

        twin = convert_exported(torch, torch_module, example_inputs, dynamic_shapes, convert)
    twin.load_state_dict(torch_module.state_dict())
    torch_modules = dict(torch_module.named_modules())
    for path, module in twin.named_modules():  # parents first: a child's own mode wins
        if path in torch_modules:
            module.train(torch_modules[path].training)
    for name, param in torch_module.named_parameters():
        if not param.requires_grad:  # frozen in torch: no gradient, no optimizer update
            owner, _, attr = name.rpartition(".")
            module = twin.get_submodule(owner)
            module._store.trainable[module._slots[attr]] = False
            module._store.bump()
    return twin
