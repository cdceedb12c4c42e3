"""The host program (roles/hosttools/files/kvfleet_vllm.py) loaded from its file, as the hosttools
role ships it: it is not a module of the collection's import path."""

from __future__ import annotations

import importlib.util
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                    "roles", "hosttools", "files", "kvfleet_vllm.py")


def load(name):
    """A fresh copy of the program under `name` (each test file patches its own)."""
    spec = importlib.util.spec_from_file_location(name, PATH)
    prog = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prog)
    return prog
