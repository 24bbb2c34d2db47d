"""jaxdl/_extras.py: `import jaxdl` works without the optional packages, and each use names its extra."""

import subprocess
import sys
import textwrap

import pytest

from jaxdl._extras import require

# Runs in a fresh interpreter in which the optional packages cannot be imported.
_WITHOUT_EXTRAS = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = {"torch", "grain", "orbax", "sklearn", "tqdm", "matplotlib"}

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    sys.meta_path.insert(0, Blocker())
    import jax.numpy as jnp
    import jaxdl as dl
    from jaxdl import data, nn, optim

    # The core works: a compiled training step.
    model = nn.Linear(3, 2)
    opt = optim.SGD(model.parameters(), lr=0.1)

    @dl.jit
    def step(model, opt, x):
        loss, grads = dl.value_and_grad(lambda m: (m(x) ** 2).sum())(model)
        opt.step(grads)
        return loss

    step(model, opt, jnp.ones((4, 3)))
    list(data.DataLoader(data.TensorDataset(jnp.ones((4, 3))), batch_size=2))  # no workers: no grain

    def message(fn):
        try:
            fn()
        except ModuleNotFoundError as e:
            return str(e)
        return "no error"

    print(message(lambda: dl.interop.from_torch(None)))
    print(message(lambda: list(data.DataLoader(data.TensorDataset(jnp.ones((4, 3))), batch_size=2,
                                               num_workers=1))))
    print(message(lambda: dl.save({"model": model}, "/nonexistent/ckpt")))
    print(message(lambda: data.datasets.digits()))
    print(sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED))
""")


def test_import_jaxdl_without_torch_or_data_extras_and_errors_name_the_extra():
    result = subprocess.run([sys.executable, "-c", _WITHOUT_EXTRAS], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[:4] == [
        "dl.interop.from_torch needs torch, which is not installed: pip install 'jaxdl[torch]'",
        "DataLoader(num_workers>0) needs grain, which is not installed: pip install 'jaxdl[data]'",
        "dl.save / dl.load needs orbax, which is not installed: pip install 'jaxdl[data]'",
        "datasets.digits needs sklearn, which is not installed: pip install 'jaxdl[data]'",
    ]
    assert lines[4] == "[]"  # nothing optional was imported


def test_require_returns_the_module_and_names_the_extra_when_missing():
    import json

    assert require("json", "data", "x") is json
    with pytest.raises(ModuleNotFoundError, match=r"thing needs no_such_pkg_.*jaxdl\[torch\]"):
        require("no_such_pkg_x1.sub", "torch", "thing")


def test_require_passes_on_an_error_from_inside_an_installed_package(tmp_path, monkeypatch):
    (tmp_path / "broken_pkg_x1.py").write_text("import no_such_dependency_x1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as info:
        require("broken_pkg_x1", "data", "thing")
    assert info.value.name == "no_such_dependency_x1" and "jaxdl[" not in str(info.value)
