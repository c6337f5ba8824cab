"""`jobsctl enqueue TYPE ...`: one subcommand per job type of the contract.

The types come from the generated descriptors (san_jobs.client._job_types), so a type
added to the contract is a subcommand with no edit here. Its flags are derived from its
input message: one per plain field (`--text`, `--day`; a repeated field is a
repeatable flag), and `--input JSON` for the whole input in proto JSON. The types that
have friendlier flags (required ones, a source's text and title side by side) are
given them below; those are conveniences, not the list of types.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from san_jobs.client._job_types import JOB_TYPES, JobTypeInfo
from san_jobs.jobsctl._values import parse_job_type, parse_since, positive_int
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

# Field types a flag can carry, and how its value is read.
_FLAG_TYPES: dict[int, Callable[[str], Any]] = {
    FieldDescriptor.TYPE_STRING: str,
    FieldDescriptor.TYPE_INT32: int,
    FieldDescriptor.TYPE_INT64: int,
    FieldDescriptor.TYPE_UINT32: int,
    FieldDescriptor.TYPE_UINT64: int,
    FieldDescriptor.TYPE_SINT32: int,
    FieldDescriptor.TYPE_SINT64: int,
    FieldDescriptor.TYPE_FLOAT: float,
    FieldDescriptor.TYPE_DOUBLE: float,
}
_STDIN = "-"
# Where the derived flags' values go (apart from the common flags' names).
_DEST = "input_{}"


class InputError(ValueError):
    """The flags do not make a valid input (a usage error)."""


def job_type_choices() -> str:
    """`card-analysis, til-generation or recall-generation`, from the contract."""
    names = [info.cli_name for info in JOB_TYPES]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


# -- the types with friendlier flags --------------------------------------------------


def _card_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--text", required=True, help="the page's text ('-' reads stdin)")
    parser.add_argument("--url", default="")
    parser.add_argument("--title", default="")


def _card_input(args: argparse.Namespace) -> Message:
    text = sys.stdin.read() if args.text == _STDIN else args.text
    return pb.CardAnalysisInput(text=text, url=args.url, title=args.title)


def _til_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--day", required=True, metavar="YYYY-MM-DD")
    parser.add_argument(
        "--note", dest="notes", action="append", default=[],
        help="repeatable; may be left out with --after (the dependencies' results are notes)",
    )  # fmt: skip


def _after(args: argparse.Namespace) -> bool:
    """Whether the job depends on others (``enqueue``'s --after; a schedule has none),
    whose results JobService adds to a TIL's notes or a recall's sources."""
    return bool(getattr(args, "depends_on", None))


def _til_input(args: argparse.Namespace) -> Message:
    if not args.notes and not _after(args):
        raise InputError("--note is required (or --after JOB_ID: its result is the note)")
    return pb.TilGenerationInput(day=args.day, notes=args.notes)


def _recall_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source-text", dest="source_texts", action="append", default=[], metavar="TEXT",
        help="a source text (repeatable; may be left out with --after: the dependencies' "
        "results are sources)",
    )  # fmt: skip
    parser.add_argument(
        "--source-title", dest="source_titles", action="append", default=[], metavar="TITLE",
        help="title of the source text at the same position (repeatable)",
    )  # fmt: skip
    parser.add_argument("--question-count", type=positive_int, default=0, metavar="N")


def _recall_input(args: argparse.Namespace) -> Message:
    if not args.source_texts and not _after(args):
        raise InputError("--source-text is required (or --after JOB_ID: its result is the source)")
    titles = list(args.source_titles)
    if len(titles) > len(args.source_texts):
        raise InputError("more --source-title than --source-text")
    titles += [""] * (len(args.source_texts) - len(titles))
    sources = [
        pb.RecallSource(title=t, text=x) for t, x in zip(titles, args.source_texts, strict=True)
    ]
    return pb.RecallGenerationInput(sources=sources, question_count=args.question_count)


_Flags = Callable[[argparse.ArgumentParser], None]
_Build = Callable[[argparse.Namespace], Message]
# Type name -> (help, flags, input from the flags).
_FRIENDLY: dict[str, tuple[str, _Flags, _Build]] = {
    "CARD_ANALYSIS": ("summary and tags of a page", _card_flags, _card_input),
    "TIL_GENERATION": ("a TIL note from notes", _til_flags, _til_input),
    "RECALL_GENERATION": ("recall questions", _recall_flags, _recall_input),
}


# -- every other type: flags derived from its input message ---------------------------


def _flag_fields(info: JobTypeInfo) -> list[Any]:
    """The input's fields that a flag can carry (strings and numbers, repeated or not):
    FieldDescriptors (upb's or the pure-Python ones, hence Any)."""
    return [f for f in info.input_type.DESCRIPTOR.fields if f.type in _FLAG_TYPES]


def _derived_flags(info: JobTypeInfo, parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input", dest="input_json", default=None, metavar="JSON",
        help=f"the whole {info.input_type.__name__} as proto JSON; flags below win over it",
    )  # fmt: skip
    for field in _flag_fields(info):
        flag = "--" + field.name.replace("_", "-")
        kind = _FLAG_TYPES[field.type]
        what = f"{info.input_type.__name__}.{field.name}"
        if field.is_repeated:
            parser.add_argument(
                flag, dest=_DEST.format(field.name), action="append", type=kind, default=None,
                help=f"{what} (repeatable)",
            )  # fmt: skip
            continue
        stdin = " ('-' reads stdin)" if kind is str else ""
        parser.add_argument(
            flag, dest=_DEST.format(field.name), type=kind, default=None, help=f"{what}{stdin}"
        )


def _derived_input(info: JobTypeInfo, args: argparse.Namespace) -> Message:
    message = info.input_type()
    if args.input_json is not None:
        try:
            json_format.Parse(args.input_json, message)
        except json_format.ParseError as error:
            raise InputError(f"--input is not a {info.input_type.__name__}: {error}") from None
    for field in _flag_fields(info):
        value = getattr(args, _DEST.format(field.name))
        if value is None:
            continue
        if field.is_repeated:
            del getattr(message, field.name)[:]
            getattr(message, field.name).extend(value)
        else:
            setattr(message, field.name, sys.stdin.read() if value == _STDIN else value)
    return message


# -- the subcommands ------------------------------------------------------------------


def add_enqueue_commands(
    kinds: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    """One `enqueue TYPE` subcommand per job type, each with `common`'s flags."""
    for info in JOB_TYPES:
        friendly = _FRIENDLY.get(info.name)
        if friendly is not None:
            help_text, add_flags, _ = friendly
            add_flags(kinds.add_parser(info.cli_name, parents=[common], help=help_text))
            continue
        parser = kinds.add_parser(
            info.cli_name,
            parents=[common],
            help=f"a {info.name} job ({info.input_type.__name__} from flags or --input)",
        )
        _derived_flags(info, parser)


def enqueue_input(args: argparse.Namespace) -> Message:
    """The input message of `enqueue TYPE`; InputError for flags that make none."""
    info = next(i for i in JOB_TYPES if i.cli_name == args.kind)
    friendly = _FRIENDLY.get(info.name)
    if friendly is not None:
        return friendly[2](args)
    return _derived_input(info, args)


def add_time_range_flags(parser: argparse.ArgumentParser, since_help: str) -> None:
    """--since, --until and --type (repeatable): the range and types of `usage` and
    `failures`."""
    parser.add_argument("--since", type=parse_since, default=None, metavar="WHEN", help=since_help)
    parser.add_argument(
        "--until", type=parse_since, default=None, metavar="WHEN",
        help="and before WHEN, same forms (default now)",
    )  # fmt: skip
    parser.add_argument(
        "--type", dest="types", action="append", type=parse_job_type, default=[],
        metavar="TYPE", help=f"{job_type_choices()} (repeatable)",
    )  # fmt: skip
