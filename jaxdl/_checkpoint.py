"""`dl.save` / `dl.load`: one call for modules, optimizers, schedulers, scalers, key streams,
loader state and plain pytrees, written by orbax-checkpoint.

Layout: `path/` holds numbered orbax checkpoints (`ckpt-<n>/`, each one
array tree plus one JSON tree describing the objects) and a `LATEST` file
naming the newest complete one. orbax writes each checkpoint into a temporary
directory and renames it when complete; `LATEST` is then replaced atomically
(`os.replace`), and only after that are older checkpoints removed. A save
killed at any point therefore leaves the previous checkpoint loadable.
"""

import os
import re
import shutil
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._extras import require
from jaxdl._module import Module
from jaxdl._store import RNG

_LATEST = "LATEST"
_VERSION = re.compile(r"^ckpt-(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt or incomplete, or does not fit the target."""


def _orbax():
    return require("orbax.checkpoint", "data", "dl.save / dl.load")


# ---- encoding: objects -> (JSON tree, flat dict of arrays) ----------------------------------------

def _rng_slots(module: Module) -> dict:
    """Key-stream slots of a module tree: {"path.name": (module, name)}."""
    out = {}
    for prefix, sub in module.named_modules():
        for name, index in sub._slots.items():
            if index is not None and sub._store.kinds[index] == RNG:
                out[f"{prefix}.{name}" if prefix else name] = (sub, name)
    return out


def _is_key(x) -> bool:
    return jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


class _Encoder:
    def __init__(self):
        self.arrays = {}

    def array(self, x):
        ref = f"a{len(self.arrays)}"
        if isinstance(x, jax.Array) and _is_key(x):
            self.arrays[ref] = np.asarray(jax.random.key_data(x))
            return {"t": "key", "ref": ref, "impl": str(jax.random.key_impl(x))}
        self.arrays[ref] = np.asarray(x)
        return {"t": "array", "ref": ref}

    def __call__(self, obj):
        if isinstance(obj, Module):
            rng = {k: getattr(m, n) for k, (m, n) in _rng_slots(obj).items()}
            return {"t": "module", "class": type(obj).__name__,
                    "state": self({"state_dict": dict(obj.state_dict()), "rng": rng})}
        if hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"):
            return {"t": "stateful", "class": type(obj).__name__, "state": self(obj.state_dict())}
        if isinstance(obj, jax.Array | np.ndarray | np.generic):
            return self.array(obj)
        if isinstance(obj, dict):
            items = []
            for key, value in obj.items():
                if not isinstance(key, str | int) or isinstance(key, bool):
                    raise TypeError(f"dl.save: dict keys must be str or int, got {key!r}")
                items.append([key, self(value)])
            return {"t": "dict", "items": items}
        if isinstance(obj, list | tuple):
            return {"t": type(obj).__name__, "items": [self(v) for v in obj]}
        if obj is None or isinstance(obj, bool | int | float | str):
            return {"t": "py", "v": obj}
        raise TypeError(
            f"dl.save cannot store {type(obj).__name__}: expected modules, optimizers, "
            "schedulers, scalers, objects with state_dict()/load_state_dict(), arrays, "
            "numbers, strings, and dicts/lists/tuples of these"
        )


def _decode(node, arrays):
    """Saved JSON tree -> plain values (objects become their state dicts)."""
    kind = node["t"]
    if kind == "array":
        return arrays[node["ref"]]
    if kind == "key":
        return jax.random.wrap_key_data(jnp.asarray(arrays[node["ref"]]), impl=node["impl"])
    if kind == "dict":
        return {key: _decode(value, arrays) for key, value in node["items"]}
    if kind in ("list", "tuple"):
        items = [_decode(v, arrays) for v in node["items"]]
        return items if kind == "list" else tuple(items)
    if kind == "py":
        return node["v"]
    state = _decode(node["state"], arrays)
    return state["state_dict"] if kind == "module" else state


# ---- save -------------------------------------------------------------------------------------------

def _versions(path) -> list[int]:
    return sorted(int(m.group(1)) for m in map(_VERSION.match, os.listdir(path)) if m)


def save(obj, path) -> str:
    """Save `obj` (any mix of modules, optimizers, schedulers, scalers, pytrees) under `path`.

    Blocks until the checkpoint is complete on disk; atomic (see the module
    docstring). Returns the directory of the new checkpoint.
    """
    path = os.path.abspath(os.fspath(path))
    encoder = _Encoder()
    meta = {"format": "jaxdl-checkpoint-1", "tree": encoder(obj)}
    if os.path.exists(path) and not os.path.isdir(path):
        raise CheckpointError(f"dl.save: {path} exists and is not a directory")
    if os.path.isdir(path) and os.listdir(path) and not os.path.exists(os.path.join(path, _LATEST)):
        raise CheckpointError(f"dl.save: {path} is a non-empty directory that is not a jaxdl "
                              "checkpoint; refusing to write into it")
    os.makedirs(path, exist_ok=True)
    versions = _versions(path)
    name = f"ckpt-{(versions[-1] + 1) if versions else 0}"
    ocp = _orbax()
    items = {"meta": ocp.args.JsonSave(meta)}
    if encoder.arrays:
        items["arrays"] = ocp.args.StandardSave(encoder.arrays)
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
        checkpointer.save(os.path.join(path, name), args=ocp.args.Composite(**items))
    _point_latest(path, name)
    for entry in os.listdir(path):  # older versions and temporaries of killed saves
        if entry not in (name, _LATEST) and entry.startswith("ckpt-"):
            shutil.rmtree(os.path.join(path, entry), ignore_errors=True)
    return os.path.join(path, name)


def _point_latest(path, name):
    fd, tmp = tempfile.mkstemp(dir=path, prefix=".latest-")
    with os.fdopen(fd, "w") as f:
        f.write(name)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(path, _LATEST))


# ---- load -------------------------------------------------------------------------------------------

def _read(path):
    path = os.path.abspath(os.fspath(path))
    latest = os.path.join(path, _LATEST)
    if not os.path.isfile(latest):
        raise CheckpointError(f"dl.load: no jaxdl checkpoint at {path} (no {_LATEST} file)")
    with open(latest) as f:
        name = f.read().strip()
    directory = os.path.join(path, name)
    if not _VERSION.match(name) or not os.path.isdir(directory):
        raise CheckpointError(f"dl.load: {latest} names {name!r}, which is missing")
    ocp = _orbax()
    try:
        with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
            meta = checkpointer.restore(directory, args=ocp.args.Composite(
                meta=ocp.args.JsonRestore()))["meta"]
            arrays = {}
            if _has_arrays(meta["tree"]):
                arrays = checkpointer.restore(directory, args=ocp.args.Composite(
                    arrays=ocp.args.StandardRestore()))["arrays"]
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        _check_refs(meta["tree"], arrays)
    except CheckpointError:
        raise
    except Exception as err:  # orbax / tensorstore / json errors of a damaged checkpoint
        raise CheckpointError(
            f"dl.load: the checkpoint {directory} is corrupt or incomplete "
            f"({type(err).__name__}: {str(err)[:300]})"
        ) from err
    return meta["tree"], arrays


def _has_arrays(node) -> bool:
    if node.get("t") in ("array", "key"):
        return True
    children = node.get("items", [])
    values = [v for _, v in children] if node.get("t") == "dict" else children
    if "state" in node:
        values = [node["state"]]
    return any(_has_arrays(v) for v in values)


def _check_refs(node, arrays):
    if node["t"] in ("array", "key") and node["ref"] not in arrays:
        raise CheckpointError(f"array {node['ref']} is missing")
    children = [v for _, v in node["items"]] if node["t"] == "dict" else node.get("items", [])
    for child in children + ([node["state"]] if "state" in node else []):
        _check_refs(child, arrays)


def load(path, target=None):
    """Load the latest checkpoint under `path`.

    Arguments:
        path: the directory given to `dl.save`.
        target: optional, the same structure as saved, holding live objects:
            modules, optimizers, schedulers, scalers (and anything with
            `load_state_dict`) are filled in place. All-or-nothing: every
            mismatch (keys, shapes, object kinds, the class of optimizers, schedulers
            and scalers) is reported in one
            CheckpointError and nothing is written.

    Returns:
        The restored tree: numpy arrays, Python values and, where `target`
        has objects, those objects (without a target, their state dicts).
    """
    tree, arrays = _read(path)
    if target is None:
        return _decode(tree, arrays)
    writes, problems = [], []
    restored = _match(target, tree, arrays, "", writes, problems)
    if problems:
        raise CheckpointError(
            "dl.load: the checkpoint does not fit the target (nothing was loaded):\n  "
            + "\n  ".join(problems)
        )
    for write in writes:
        write()
    return restored


def _match(target, node, arrays, where, writes, problems):
    """Validate `target` against saved `node`; queue the writes; return the restored value."""
    label = where or "<root>"
    kind = node["t"]
    if isinstance(target, Module):
        if kind != "module":
            problems.append(f"{label}: target is a module, saved is {kind}")
            return target
        _match_module(target, _decode(node["state"], arrays), label, writes, problems)
        return target
    if hasattr(target, "load_state_dict") and hasattr(target, "state_dict"):
        if kind != "stateful":
            problems.append(f"{label}: target is a {type(target).__name__}, saved is {kind}")
            return target
        if node["class"] != type(target).__name__:  # e.g. Adam's state into an SGD
            problems.append(f"{label}: target is a {type(target).__name__}, saved is a "
                            f"{node['class']}")
            return target
        _match_stateful(target, _decode(node["state"], arrays), label, writes, problems)
        return target
    if isinstance(target, dict):
        if kind != "dict":
            problems.append(f"{label}: target is a dict, saved is {kind}")
            return target
        saved = dict((k, v) for k, v in node["items"])
        missing, unexpected = [k for k in target if k not in saved], [k for k in saved if k not in target]
        if missing or unexpected:
            problems.append(f"{label}: missing keys {missing}, unexpected keys {unexpected}")
        return {k: _match(v, saved[k], arrays, f"{where}.{k}" if where else str(k), writes, problems)
                for k, v in target.items() if k in saved}
    if isinstance(target, list | tuple):
        if kind not in ("list", "tuple") or len(node["items"]) != len(target):
            count = len(node.get("items", []))
            problems.append(f"{label}: target has {len(target)} items, saved {kind} has {count}")
            return target
        items = [_match(t, n, arrays, f"{where}[{i}]", writes, problems)
                 for i, (t, n) in enumerate(zip(target, node["items"]))]
        return items if isinstance(target, list) else tuple(items)
    value = _decode(node, arrays)
    if hasattr(target, "shape") and np.shape(value) != tuple(target.shape):
        problems.append(f"{label}: expected shape {tuple(target.shape)}, got {np.shape(value)}")
    return value


def _match_module(module, state, label, writes, problems):
    current = module.state_dict()
    saved = state["state_dict"]
    missing = [k for k in current if k not in saved]
    unexpected = [k for k in saved if k not in current]
    if missing or unexpected:
        problems.append(f"{label} ({type(module).__name__}): missing keys {missing}, "
                        f"unexpected keys {unexpected}")
    for key, value in current.items():
        if key in saved and tuple(np.shape(saved[key])) != tuple(value.shape):
            problems.append(f"{label}.{key}: expected shape {tuple(value.shape)}, "
                            f"got {tuple(np.shape(saved[key]))}")
    slots = _rng_slots(module)
    if set(slots) != set(state["rng"]):
        problems.append(f"{label}: key streams {sorted(slots)} here, {sorted(state['rng'])} saved")

    def write():
        module.load_state_dict(saved)
        for key, (sub, name) in slots.items():
            sub._store.write(sub._slots[name], state["rng"][key])

    writes.append(write)


def _match_stateful(obj, state, label, writes, problems):
    plan = getattr(obj, "_plan_load", None)
    if plan is not None:  # optimizers validate state names and shapes themselves
        _, found = plan(state)
        problems.extend(f"{label}: {p}" for p in found)
    else:
        expected = set(obj.state_dict())
        if expected != set(state):
            problems.append(f"{label} ({type(obj).__name__}): expected keys {sorted(expected)}, "
                            f"saved {sorted(state)}")
    writes.append(lambda: obj.load_state_dict(state))
