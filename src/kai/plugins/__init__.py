"""Built-in plugins.  Importing this package registers all of them."""

from kai.plugins import (  # noqa: F401
    examples,
    generators,
    inert,
    loadaware,
    minruntime,
    ordering,
    predicates,
    proportion,
    scoring,
    volcano,
)
