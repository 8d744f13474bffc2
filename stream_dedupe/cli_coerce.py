"""Option values converted without pydantic: typer 0.2x builds a pydantic ``TypeAdapter`` per option.

Importing pydantic and building those adapters was ~0.1 s of every command's start-up, for
options that are plain ``str``, ``int``, ``float``, ``bool``, ``Path`` or lists of ``str``. The
command group here gives such options a converter of their own before click parses them; an
option of any other kind keeps typer's. The hook uses typer's ``RuntimeParam`` (private API,
pinned by ``constraints.txt``): if it is missing, everything falls back to typer's own path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from stream_dedupe.cli_support import Commands

try:  # typer >= 0.24 (the vendored click and the runtime coercion layer)
    from typer._coercion import RuntimeParam
except ImportError:  # pragma: no cover - another typer: keep its coercion
    RuntimeParam = None  # type: ignore[assignment,misc]

_CONVERTERS: dict[Any, tuple[Callable[[Any], Any], str]] = {
    str: (str, "string"),
    int: (int, "integer"),
    float: (float, "number"),
    Path: (Path, "path"),
}

if RuntimeParam is not None:

    @dataclass(frozen=True)
    class _Plain(RuntimeParam):
        convert: Callable[[Any], Any]
        label: str
        many: bool

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if self.many:
                return [self._one(v, param, ctx) for v in (value if isinstance(value, list | tuple) else [value])]
            return self._one(value, param, ctx)

        def _one(self, value: Any, param: Any, ctx: Any) -> Any:
            if self.convert is bool and isinstance(value, bool):
                return value
            try:
                return self.convert(value)
            except (TypeError, ValueError):
                raise typer.BadParameter(f"{value!r} is not a valid {self.label}.", ctx=ctx, param=param) from None


def _plain(descriptor: Any) -> Any:
    annotation, info = descriptor.annotation, descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None or (info.min, info.max) != (None, None):
        return None
    many = getattr(annotation, "__origin__", None) is list
    leaf = annotation.__args__[0] if many and len(annotation.__args__) == 1 else annotation
    if leaf is bool and not many:
        return _Plain(parameter_info=info, annotation=annotation, convert=bool, label="boolean", many=False)
    if leaf not in _CONVERTERS:
        return None
    convert, label = _CONVERTERS[leaf]
    return _Plain(parameter_info=info, annotation=annotation, convert=convert, label=label, many=many)


class FastCommands(Commands):
    """:class:`~stream_dedupe.cli_support.Commands` whose plain options are converted without pydantic."""

    def parse_args(self, ctx: Any, args: list[str]) -> Any:
        """Parse the group's own options (``--version``) with the plain converters."""
        _give_converters(self.get_params(ctx))
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """Resolve the sub-command, then give its plain options their converters."""
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            _give_converters(command.get_params(ctx))  # with its --help option
        return name, command, rest


def _give_converters(params: list[Any]) -> None:
    if RuntimeParam is None:
        return
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is not None and getattr(param, "_runtime_param", 0) is None:
            param._runtime_param = _plain(descriptor)
