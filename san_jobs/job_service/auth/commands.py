"""`job-service tokens create|list|revoke`: manage JobService's bearer tokens.

    job-service tokens create NAME --role {submitter,viewer,operator} [--expires-in 90d]
                              [--database-url URL]
    job-service tokens list [--database-url URL]
    job-service tokens revoke NAME [--database-url URL]

`create` prints the token on stdout, alone (TOKEN=$(job-service tokens create ...)),
and only then: the database keeps its hash. With --expires-in (7d, 12h, 30m, 90s, or
seconds) the token stops working by itself that long after it is made; `list` shows
when (EXPIRES, "-" for never). The database is migrated first, so a new
one works. --database-url defaults to SAN_JOBS_DATABASE_URL, then to the service's
default. Exit codes: 0 done, 1 refused or failed (one line on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from san_jobs.job_service.auth.bearer_tokens import new_token, token_hash
from san_jobs.job_service.auth.roles import Role
from san_jobs.job_service.domain.errors import StorageError
from san_jobs.job_service.domain.retention import parse_retention
from san_jobs.job_service.settings import ENV_PREFIX, JobServiceSettings
from san_jobs.job_service.storage.api_tokens import SqlTokenStore, StoredToken, TokenNameTakenError
from san_jobs.job_service.storage.engine import create_engine
from san_jobs.job_service.storage.migrate import migrate
from san_jobs.shared.safe_text import safe_text
from san_jobs.shared.sqlite_files import prepare_sqlite_url

# A name becomes every job's requested_by and appears in logs: plain characters only.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}")
NEVER_WORDS = frozenset({"never", "off", "forever"})


class CommandError(Exception):
    """The command cannot be done; the message says why in one line."""


def _name(value: str) -> str:
    if not NAME_PATTERN.fullmatch(value):
        raise argparse.ArgumentTypeError(
            "1 to 128 characters: letters, digits and . _ @ : - (not first)"
        )
    return value


def _expires_in(value: str) -> float | None:
    """Seconds until a new token expires, None for never (the same durations as the
    retention flags: 90d, 12h, 30m, 1d12h, seconds; `never`)."""
    try:
        seconds = parse_retention(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).replace(", or off", ", or never")) from None
    if seconds is None and value.strip().lower() not in NEVER_WORDS:
        # parse_retention reads 0 as "keep forever"; a token meant to last 0 s is a typo.
        raise argparse.ArgumentTypeError(f"expected a duration above 0, or never; got {value!r}")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="job-service tokens", description="Manage JobService's bearer tokens."
    )
    commands = parser.add_subparsers(dest="action", required=True)
    database = argparse.ArgumentParser(add_help=False)
    database.add_argument(
        "--database-url",
        dest="database_url",
        default=None,
        help=f"SQLAlchemy async URL of JobService's database [env {ENV_PREFIX}DATABASE_URL]",
    )
    create = commands.add_parser(
        "create", parents=[database], help="make a token and print it, once"
    )
    create.add_argument("name", type=_name, help="who the token is: every job's requested_by")
    create.add_argument("--role", required=True, choices=[role.value for role in Role])
    create.add_argument(
        "--expires-in",
        dest="expires_in",
        type=_expires_in,
        default=None,
        metavar="DURATION",
        help="the token stops working this long after now: 90d, 12h, 30m, 90s "
        "(default never; revoke it any time)",
    )
    commands.add_parser("list", parents=[database], help="every token (never the secret)")
    revoke = commands.add_parser("revoke", parents=[database], help="refuse a token from now on")
    revoke.add_argument("name", type=_name)
    return parser


def _database_url(given: str | None) -> str:
    try:
        overrides: dict[str, Any] = {"database_url": given} if given else {}
        settings = JobServiceSettings(**overrides)
    except ValidationError as error:
        problems = "; ".join(str(item["msg"]) for item in error.errors())
        raise CommandError(f"invalid settings: {problems}") from None
    return settings.database_url


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_tokens(tokens: Sequence[StoredToken]) -> str:
    """The `tokens list` table: name, role, created, revoked, expires (UTC; "-": not
    revoked, never expires). EXPIRES is last so scripts reading the first four
    columns read what they did before it existed."""
    rows = [("NAME", "ROLE", "CREATED", "REVOKED", "EXPIRES")]
    rows += [
        (t.name, t.role, _when(t.created_at), _when(t.revoked_at), _when(t.expires_at))
        for t in tokens
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    )


async def run_command(args: argparse.Namespace) -> str:
    """Do what `args` asks; what to print on stdout."""
    url = _database_url(args.database_url)
    try:
        prepare_sqlite_url(url)
        await migrate(url)
    except Exception as error:
        raise CommandError(f"cannot prepare the database at {url}: {error}") from None
    engine = create_engine(url, pool_size=1, max_overflow=0)
    store = SqlTokenStore(engine)
    try:
        if args.action == "create":
            token = new_token()
            now = datetime.now(UTC)
            expires_at = (
                None if args.expires_in is None else now + timedelta(seconds=args.expires_in)
            )
            try:
                await store.add(args.name, args.role, token_hash(token), now, expires_at=expires_at)
            except TokenNameTakenError as error:
                raise CommandError(str(error)) from None
            until = "" if expires_at is None else f", expires {_when(expires_at)}"
            print(
                f"token for {args.name} ({args.role}{until}); it is shown only now:",
                file=sys.stderr,
            )
            return token
        if args.action == "list":
            return format_tokens(await store.list())
        if not await store.revoke(args.name):
            raise CommandError(f"no live token named {args.name!r}")
        return f"revoked {args.name}; every instance refuses it within seconds"
    except StorageError as error:
        raise CommandError(f"database error: {error}") from None
    finally:
        await engine.dispose()


def tokens_main(argv: Sequence[str]) -> int:
    """`job-service tokens ...`; the exit code."""
    args = build_parser().parse_args(argv)
    try:
        output = asyncio.run(run_command(args))
    except CommandError as error:
        print(safe_text(f"job-service tokens: {error}"), file=sys.stderr)
        return 1
    print(output)
    return 0
