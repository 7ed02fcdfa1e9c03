"""One exception root per package: every exception class defined in a package's modules derives
from that package's root, so a caller can catch "anything from the bookie" (or the metadata
layer, or the client) in one clause (issue 23)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

ROOTS = {
    "bookie": ("bookie.errors", "BookieError"),
    "metadata": ("metadata.errors", "MetadataError"),
    "pyspark_ledger": ("pyspark_ledger.errors", "PySparkLedgerError"),
}


def modules_of(package: str) -> list[str]:
    top = importlib.import_module(package)
    # __main__ modules run their command when imported.
    return [package] + [m.name for m in pkgutil.walk_packages(top.__path__, prefix=f"{package}.")
                        if not m.name.endswith("__main__")]


def exceptions_defined_in(module_name: str) -> list[type[BaseException]]:
    module = importlib.import_module(module_name)
    return [cls for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, BaseException) and cls.__module__ == module_name]


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_every_exception_of_a_package_derives_from_its_root(package: str) -> None:
    root_module, root_name = ROOTS[package]
    root = getattr(importlib.import_module(root_module), root_name)
    found = [cls for name in modules_of(package) for cls in exceptions_defined_in(name)]
    assert len(found) > 3, found  # the walk did find the package's exceptions
    strays = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in found if not issubclass(cls, root))
    assert not strays, f"exceptions of {package} not derived from {root_name}: {strays}"
