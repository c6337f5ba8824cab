"""Command-line flags derived from a pydantic-settings model, for all four programs
(job-service, ai-gateway, jobsctl, san-web).

The model is the one declaration of a setting: its field gives the name, type,
default, bounds and help text (``description``), its ``env_prefix`` the environment
variable. `SettingsParser` turns every field into a flag (``max_message_bytes`` is
``--max-message-bytes``, read from ``<PREFIX>MAX_MESSAGE_BYTES`` too), reads the
flags given over the environment (a flag wins over its variable), and ends the
program on a bad value with one line on stderr naming the flag or the variable it
came from, exit code 2, no traceback.

pydantic-settings' own ``CliSettingsSource`` was tried and left: its help names no
environment variable and shows types for metavars (``{Path,null}``), a bad value
raises a multi-line ``ValidationError`` that cannot tell a flag from its variable,
and the programs' positional subcommands (``job-service migrate``, ``jobsctl get``)
are plain argparse. Deriving argparse from ``model_fields`` keeps each flag, its help
and its exit exactly, and still leaves every value's parsing to the model.

How a field becomes a flag:

- ``bool``: a switch, ``--x`` (true) and ``--no-x`` (false, over a variable's true);
- ``Literal[...]``: a value among the choices, checked by the model (its message
  lists them), shown as ``{a,b}``;
- ``dict[str, T]``: ``--x KEY=VALUE``, repeatable; the variable holds JSON (or what
  the field's own before-validator reads, with ``NoDecode``). Flags and
  variable are merged key by key, a flag's key winning (pydantic-settings' own rule
  for a mapping read from several sources);
- ``X | None``: a flag taking an X; unset means the default;
- anything else (``str``, ``int``, ``float``, ``Path``, ``SecretStr``): one value,
  its metavar the field's ``json_schema_extra={"metavar": ...}`` or its NAME.
"""

from __future__ import annotations

import argparse
import re
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, TypeVar

from pydantic import AfterValidator, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsError

from san_jobs.shared.safe_text import safe_text

EXIT_USAGE = 2
"""A bad flag or value: argparse's own exit code for a usage error."""

SETTINGS = "settings"
"""The parsed namespace's attribute holding the settings model."""
FLAGS_GIVEN = "flags_given"
"""The parsed namespace's attribute holding the fields given as flags."""

SettingsT = TypeVar("SettingsT", bound=BaseSettings)

_QUOTED_INPUT_CHARS = 100
# pydantic-settings' message for a variable that is not valid JSON (a mapping field).
_UNPARSABLE_FIELD = re.compile(r'field "(?P<name>\w+)"')


def _host_port(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT with a port from 0 to 65535, got {value!r}")
    return value


HostPort = Annotated[str, AfterValidator(_host_port)]
"""An address to listen on or call, ``HOST:PORT`` (``[::1]:8000`` for IPv6)."""


def flag_of(field_name: str) -> str:
    """The flag of a settings field: ``max_message_bytes`` -> ``--max-message-bytes``."""
    return "--" + field_name.replace("_", "-")


def env_of(model: type[BaseSettings], field_name: str) -> str:
    """The environment variable of a settings field: its model's prefix, upper case."""
    return (str(model.model_config.get("env_prefix", "")) + field_name).upper()


def _without_none(annotation: Any) -> Any:
    """``X`` for ``X | None``; the annotation itself otherwise. ``Annotated[X, ...]``
    (``HostPort | None``: pydantic unwraps it only at the top level) is ``X``: the
    model still applies its validators."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kept = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(kept) == 1:
            annotation = kept[0]
    if typing.get_origin(annotation) is Annotated:
        return typing.get_args(annotation)[0]
    return annotation


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _shown_default(field: FieldInfo) -> str | None:
    """The default as the help shows it; None when there is nothing to show (unset,
    off, computed at start, or an empty secret)."""
    if field.default_factory is not None or field.default is None:
        return None
    default = field.default
    if isinstance(default, bool):
        return "on" if default else None
    if isinstance(default, SecretStr):
        return "***" if default.get_secret_value() else None
    if isinstance(default, float):
        return f"{default:g}"
    text = str(default)
    return text or None


def _help(model: type[BaseSettings], name: str, field: FieldInfo) -> str:
    if not field.description:
        # The description is the flag's --help: a setting nobody can read about is a bug.
        raise TypeError(f"{model.__name__}.{name} has no description (its --help text)")
    text = field.description
    shown = _shown_default(field)
    if shown is not None:
        text += f" (default {shown})"
    return (text + f" [env {env_of(model, name)}]").replace("%", "%%")  # argparse formats %


def _metavar(name: str, field: FieldInfo, kind: Any) -> str:
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("metavar"), str):
        return str(extra["metavar"])
    if typing.get_origin(kind) is dict:
        return "KEY=VALUE"
    if typing.get_origin(kind) is Literal:
        return "{" + ",".join(str(choice) for choice in typing.get_args(kind)) + "}"
    if kind is Path:
        return "PATH"
    return name.upper()


def _add_flag(
    parser: argparse.ArgumentParser, model: type[BaseSettings], name: str, field: FieldInfo
) -> None:
    """One flag for one field. Its default is SUPPRESS: a flag not given is absent from
    the namespace, so the model's own default or the environment applies."""
    kind = _without_none(field.annotation)
    flag, text = flag_of(name), _help(model, name, field)
    if kind is bool:
        parser.add_argument(
            flag, dest=name, action=argparse.BooleanOptionalAction,
            default=argparse.SUPPRESS, help=text,
        )  # fmt: skip
    elif typing.get_origin(kind) is dict:
        parser.add_argument(
            flag, dest=name, action="append", type=_key_value,
            metavar=_metavar(name, field, kind),
            default=argparse.SUPPRESS, help=text,
        )  # fmt: skip
    elif kind in (str, int, float, Path, SecretStr) or typing.get_origin(kind) is Literal:
        # No argparse type or choices: the model parses and checks every value, so a
        # flag and its variable are refused alike, in the model's words.
        parser.add_argument(
            flag, dest=name, metavar=_metavar(name, field, kind),
            default=argparse.SUPPRESS, help=text,
        )  # fmt: skip
    else:
        raise TypeError(f"{model.__name__}.{name}: no flag for a {kind!r} setting")


def _quoted(value: object) -> str:
    text = repr(value)
    if len(text) > _QUOTED_INPUT_CHARS:
        text = text[:_QUOTED_INPUT_CHARS] + "..."
    return text


def describe_invalid(
    error: ValidationError, model: type[BaseSettings], given: typing.Collection[str]
) -> str:
    """One line for every problem in ``error``: each names the flag when it was given,
    else the variable, and quotes the value unless its message does (never a
    secret's); a check across fields has its own message, which names the flags. URL
    passwords are masked."""
    parts = []
    for problem in error.errors():
        location = problem["loc"]
        if not location:
            parts.append(str(problem["msg"]))
            continue
        name = str(location[0])
        where = flag_of(name) if name in given else env_of(model, name)
        if len(location) > 1:  # a mapping's key
            where += " " + ".".join(str(part) for part in location[1:])
        message = str(problem["msg"])
        field = model.model_fields.get(name)
        quoted = _quoted(problem.get("input"))
        if field is not None and _without_none(field.annotation) is SecretStr:
            quoted = ""
        got = f" (got {quoted})" if quoted and quoted not in message else ""
        parts.append(f"{where}: {message}{got}")
    return safe_text("; ".join(parts))


def _describe_unreadable(error: SettingsError, model: type[BaseSettings]) -> str:
    """One line for a variable pydantic-settings could not parse (not JSON)."""
    match = _UNPARSABLE_FIELD.search(str(error))
    if match is None or match["name"] not in model.model_fields:
        return safe_text(str(error))
    cause = f" ({error.__cause__})" if error.__cause__ is not None else ""
    return safe_text(f"{env_of(model, match['name'])}: expected JSON{cause}")


class SettingsParser(argparse.ArgumentParser):
    """argparse with a flag for every field of ``settings``, whose ``parse_args`` also
    reads the model: the namespace then holds every setting under its field name, the
    model itself as ``settings`` and the fields given as flags as ``flags_given``.

    A usage error or a bad value is one line on stderr and exit code 2. Without
    ``settings`` (a subcommand's parser, a parent), it is argparse with that one-line
    error.
    """

    def __init__(self, *args: Any, settings: type[BaseSettings] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.settings_model = settings
        self.settings_flags: dict[str, str] = {}
        """Field name -> its flag."""
        if settings is not None:
            for name, field in settings.model_fields.items():
                _add_flag(self, settings, name, field)
                self.settings_flags[name] = flag_of(name)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed = super().parse_args(args, namespace)
        if self.settings_model is not None:
            self._read_settings(self.settings_model, parsed)
        return parsed

    def _read_settings(self, model: type[BaseSettings], parsed: argparse.Namespace) -> None:
        given: dict[str, Any] = {}
        for name in self.settings_flags:
            if hasattr(parsed, name):
                value = getattr(parsed, name)
                given[name] = dict(value) if isinstance(value, list) else value
        try:
            settings = model(**given)
        except ValidationError as error:
            self.error(describe_invalid(error, model, given))
        except SettingsError as error:
            self.error(_describe_unreadable(error, model))
        for name in self.settings_flags:
            setattr(parsed, name, getattr(settings, name))
        setattr(parsed, SETTINGS, settings)
        setattr(parsed, FLAGS_GIVEN, frozenset(given))


def settings_of(parsed: argparse.Namespace, model: type[SettingsT]) -> SettingsT:
    """The settings model a `SettingsParser` read into ``parsed``, typed."""
    settings = getattr(parsed, SETTINGS, None)
    if not isinstance(settings, model):
        raise TypeError(f"no {model.__name__} in these parsed arguments")
    return settings


def flags_given(parsed: argparse.Namespace) -> frozenset[str]:
    """The settings fields given on the command line (not from the environment)."""
    given: frozenset[str] = getattr(parsed, FLAGS_GIVEN, frozenset())
    return given
