"""User-facing errors.

Everything a user can get wrong in a manifest or a configuration is reported as an
:class:`InputError` that names where the problem is (file, document, object, field),
so the command line can print one clear line and exit with code 2.
"""

from __future__ import annotations


class KaiError(Exception):
    """Base class of all errors kai raises on purpose."""


class InputError(KaiError):
    """Bad input: a manifest, a configuration value or a command-line argument."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        document: int | None = None,
        obj: str | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.document = document
        self.obj = obj
        self.field = field
        super().__init__(self.render())

    def render(self) -> str:
        where = []
        if self.file is not None:
            where.append(self.file)
        if self.document is not None:
            where.append(f"document {self.document}")
        if self.obj is not None:
            where.append(self.obj)
        if self.field is not None:
            where.append(f"field {self.field}")
        prefix = ": ".join([", ".join(where)]) if where else ""
        return f"{prefix}: {self.message}" if prefix else self.message


class ConfigError(InputError):
    """Bad scheduler configuration (unknown action or plugin, bad plugin argument)."""
