"""`load_torch_state_dict`: read a `torch.save(state_dict)` file without importing torch.

A `.pt`/`.pth` file is a zip archive: `<name>/data.pkl` (a pickle of the dict,
whose tensors refer to storages by key), `<name>/data/<key>` (each storage's
raw bytes) and `<name>/byteorder`. The pickle is read by a restricted
unpickler that resolves only the globals a plain state dict needs, as
`torch.load(weights_only=True)` does; any other global (a file that would run
code when loaded) is refused with an error naming it.
"""

import collections
import pickle
import zipfile

import ml_dtypes
import numpy as np

_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": ml_dtypes.bfloat16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class TorchFileError(ValueError):
    """The file is not a readable torch state dict (corrupt, truncated, or unsafe)."""


class _StorageType:
    def __init__(self, name):
        self.name, self.dtype = name, np.dtype(_STORAGE_DTYPES[name])


def _rebuild_tensor(storage, storage_offset, size, stride, requires_grad=False,
                    backward_hooks=None, metadata=None):
    """A numpy copy of the (possibly strided, possibly shared) view of `storage`."""
    size, stride = tuple(size), tuple(stride)
    if any(s == 0 for s in size):
        return np.zeros(size, storage.dtype)
    last = storage_offset + sum((n - 1) * s for n, s in zip(size, stride))
    if storage_offset < 0 or any(s < 0 for s in stride) or last >= storage.size:
        raise TorchFileError(
            f"tensor of shape {size} (offset {storage_offset}, strides {stride}) reaches past its "
            f"storage of {storage.size} elements: the file is corrupt"
        )
    view = np.lib.stride_tricks.as_strided(
        storage[storage_offset:], shape=size, strides=[s * storage.itemsize for s in stride]
    )
    return np.array(view)


def _rebuild_parameter(data, requires_grad, backward_hooks, *args):
    return data


_ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive: zipfile.ZipFile, prefix: str, byteorder: str):
        super().__init__(file)
        self._archive, self._prefix, self._byteorder = archive, prefix, byteorder
        self._storages = {}

    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        raise TorchFileError(
            f"refusing to load global '{module}.{name}': a state dict file needs only tensors "
            "and dicts, and unpickling this global could run arbitrary code"
        )

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType)):
            raise TorchFileError(f"unsupported storage reference {pid!r} in the pickle")
        _, storage_type, key, _location, numel = pid
        cached = self._storages.get(key)
        if cached is None:
            entry = f"{self._prefix}/data/{key}"
            try:
                raw = self._archive.read(entry)
            except KeyError as err:
                raise TorchFileError(f"storage entry {entry} is missing: the file is corrupt") from err
            dtype = storage_type.dtype.newbyteorder("<" if self._byteorder == "little" else ">")
            if len(raw) < numel * dtype.itemsize:
                raise TorchFileError(
                    f"storage {entry} holds {len(raw)} bytes, {numel * dtype.itemsize} expected: "
                    "the file is truncated"
                )
            cached = np.frombuffer(raw, dtype, count=numel).astype(storage_type.dtype)
            self._storages[key] = cached
        return cached


def load_torch_state_dict(path) -> collections.OrderedDict:
    """Read a file written by `torch.save(model.state_dict(), path)`; torch is not imported.

    Arguments:
        path: a `.pt` / `.pth` file in torch's zip format (the default since torch 1.6).

    Returns:
        An OrderedDict of numpy arrays (bfloat16 through `ml_dtypes`), with the
        file's keys; views and shared storages come back as separate arrays.

    Raises:
        TorchFileError (a ValueError) for a corrupt, truncated, legacy-format
        or unsafe file, naming the problem (and the refused global).
    """
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as err:
        raise TorchFileError(
            f"{path} is not a torch zip archive (truncated, corrupt, or saved with "
            "_use_new_zipfile_serialization=False, which is not supported)"
        ) from err
    with archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise TorchFileError(f"{path}: expected one <name>/data.pkl entry, found {pickles}")
        prefix = pickles[0][: -len("/data.pkl")]
        try:
            byteorder = archive.read(f"{prefix}/byteorder").decode().strip()
        except KeyError:
            byteorder = "little"  # files from before torch recorded it were little-endian
        try:
            with archive.open(pickles[0]) as f:
                result = _Unpickler(f, archive, prefix, byteorder).load()
        except TorchFileError:
            raise
        except (pickle.UnpicklingError, EOFError, zipfile.BadZipFile, ValueError, TypeError,
                AttributeError, IndexError, KeyError) as err:
            raise TorchFileError(f"{path}: cannot read the pickled state dict "
                                 f"({type(err).__name__}: {err})") from err
    if not isinstance(result, dict):
        raise TorchFileError(f"{path} holds a {type(result).__name__}, not a state dict")
    return collections.OrderedDict(result)
