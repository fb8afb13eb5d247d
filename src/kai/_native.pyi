# The compiled core (native/bindings.cpp, pybind11). Its kernels are called through
# kai.backends.native_backend, whose signatures are the typed interface.
from typing import Any

def __getattr__(name: str) -> Any: ...
