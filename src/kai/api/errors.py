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

    def located(
        self,
        *,
        file: str | None = None,
        document: int | None = None,
        field_prefix: str | None = None,
    ) -> InputError:
        """A copy of this error that also says where it is.

        ``file`` and ``document`` apply when the error names no file yet;
        ``field_prefix`` is the path of the object its field is in (``tiers[0].plugins[2]``
        before ``arguments.kValue``).
        """
        field = self.field
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        if self.file is not None:
            file, document = self.file, self.document
        return type(self)(self.message, file=file, document=document, obj=self.obj, field=field)


class ConfigError(InputError):
    """Bad scheduler configuration (unknown action or plugin, bad plugin argument)."""
