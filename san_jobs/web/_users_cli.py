"""``san-web users create NAME [--role ROLE] --database-url URL``: a login for the
page, its password read from standard input (typed without echo on a terminal), stored
as an argon2 hash. ``san-web users set-role NAME ROLE``: what an existing user may do.
Roles: ``user`` (the default: the scraps page), ``viewer`` (also /ops, read only),
``operator`` (also /ops' RetryFailed and cancel). ``san-web users passwd NAME``: a new
password (from standard input), every session of the user ended. ``san-web users
end-sessions NAME``: log the user out everywhere. ``san-web users delete NAME``: the
user, their sessions, scraps and days removed. ``san-web users set-time-zone NAME
ZONE``: where the user's days end (``default``: san-web's ``--time-zone``).

A password that is set must pass ``password_problem`` (12 characters at least, not
holding the user name, ...); passwords set before that rule keep working.

Exit codes: 0 done; 1 the name is taken (create) or unknown (the others), or the
database cannot be reached; 2 a bad name, role or password.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import sqlalchemy.exc as sa_exc

from san_jobs.web._days import time_zone
from san_jobs.web._passwords import hash_password, password_problem, username_problem
from san_jobs.web._store import DEFAULT_ROLE, WEB_ROLES, ScrapStore, UserExistsError

T = TypeVar("T")


def build_users_parser(default_database_url: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="san-web users", description="Manage the users who may log in to san-web."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser(
        "create", help="add a user; the password is read from standard input"
    )
    create.add_argument("name", metavar="NAME")
    create.add_argument(
        "--role",
        choices=WEB_ROLES,
        default=DEFAULT_ROLE,
        help="user: the scraps page; viewer: also /ops, read only; operator: also /ops' "
        "actions (default: user)",
    )
    set_role = commands.add_parser("set-role", help="change what an existing user may do")
    set_role.add_argument("name", metavar="NAME")
    set_role.add_argument("role", metavar="ROLE", choices=WEB_ROLES, help=" | ".join(WEB_ROLES))
    set_zone = commands.add_parser(
        "set-time-zone",
        help="where a user's days end (--til-at there); 'default' for san-web's --time-zone",
    )
    set_zone.add_argument("name", metavar="NAME")
    set_zone.add_argument("zone", metavar="ZONE", help="an IANA name (Europe/Paris) or default")
    passwd = commands.add_parser(
        "passwd",
        help="give a user a new password (read from standard input); ends their sessions",
    )
    end_sessions = commands.add_parser(
        "end-sessions", help="log a user out everywhere (every session of theirs ends)"
    )
    delete = commands.add_parser("delete", help="remove a user, their sessions and their scraps")
    for command in (passwd, end_sessions, delete):
        command.add_argument("name", metavar="NAME")
    for command in (create, set_role, set_zone, passwd, end_sessions, delete):
        command.add_argument(
            "--database-url",
            default=os.environ.get("SAN_WEB_DATABASE_URL") or default_database_url,
            metavar="URL",
            help="san-web's database (as `san-web --database-url`) [env SAN_WEB_DATABASE_URL]",
        )
    return parser


def read_password() -> str:
    """The password: typed without echo on a terminal, else all of standard input
    less one line ending (so `echo secret |` and a file both work)."""
    if sys.stdin.isatty():
        return getpass.getpass("Password: ")
    text = sys.stdin.read()
    return text.removesuffix("\n").removesuffix("\r")


async def _create(database_url: str, name: str, password_hash: str, role: str) -> None:
    store = await ScrapStore.open(database_url)
    try:
        await store.add_user(name, password_hash, role)
    finally:
        await store.close()


async def _set_role(database_url: str, name: str, role: str) -> bool:
    store = await ScrapStore.open(database_url)
    try:
        return await store.set_role(name, role)
    finally:
        await store.close()


def _database_error(command: str, error: BaseException) -> int:
    sys.stderr.write(
        f"san-web users {command}: error: cannot use the database: {type(error).__name__}\n"
    )
    return 1


def set_role_main(args: argparse.Namespace) -> int:
    """``san-web users set-role NAME ROLE``; the exit code."""
    try:
        found = asyncio.run(_set_role(args.database_url, args.name, args.role))
    except (OSError, sa_exc.SQLAlchemyError) as error:
        return _database_error("set-role", error)
    if not found:
        sys.stderr.write(f"san-web users set-role: error: no user {args.name!r}\n")
        return 1
    print(f"user {args.name} now has role {args.role}")
    return 0


async def _with_store(database_url: str, act: Callable[[ScrapStore], Awaitable[T]]) -> T:
    store = await ScrapStore.open(database_url)
    try:
        return await act(store)
    finally:
        await store.close()


def _new_password(name: str) -> tuple[str, str | None]:
    """The password read for ``name`` (after checking the name), and why it cannot be
    set, if it cannot."""
    problem = username_problem(name)
    if problem is not None:
        return "", problem
    password = read_password()
    return password, password_problem(password, name)


def _unknown_user(command: str, name: str) -> int:
    sys.stderr.write(f"san-web users {command}: error: no user {name!r}\n")
    return 1


def passwd_main(args: argparse.Namespace) -> int:
    """``san-web users passwd NAME``; the exit code."""
    password, problem = _new_password(args.name)
    if problem is not None:
        sys.stderr.write(f"san-web users passwd: error: {problem}\n")
        return 2
    password_hash = hash_password(password)
    try:
        ended = asyncio.run(
            _with_store(args.database_url, lambda s: s.change_password(args.name, password_hash))
        )
    except (OSError, sa_exc.SQLAlchemyError) as error:
        return _database_error("passwd", error)
    if ended is None:
        return _unknown_user("passwd", args.name)
    print(f"new password for {args.name}; {_sessions(ended)} ended")
    return 0


def end_sessions_main(args: argparse.Namespace) -> int:
    """``san-web users end-sessions NAME``; the exit code."""
    try:
        ended = asyncio.run(_with_store(args.database_url, lambda s: s.end_sessions(args.name)))
    except (OSError, sa_exc.SQLAlchemyError) as error:
        return _database_error("end-sessions", error)
    if ended is None:
        return _unknown_user("end-sessions", args.name)
    print(f"{_sessions(ended)} of {args.name} ended")
    return 0


def delete_main(args: argparse.Namespace) -> int:
    """``san-web users delete NAME``; the exit code."""
    try:
        removed = asyncio.run(_with_store(args.database_url, lambda s: s.delete_user(args.name)))
    except (OSError, sa_exc.SQLAlchemyError) as error:
        return _database_error("delete", error)
    if removed is None:
        return _unknown_user("delete", args.name)
    sessions, scraps = removed
    print(f"deleted user {args.name}, {_sessions(sessions)} and {scraps} scrap(s)")
    return 0


def set_time_zone_main(args: argparse.Namespace) -> int:
    """``san-web users set-time-zone NAME ZONE``; the exit code."""
    zone = None if args.zone == "default" else args.zone
    if zone is not None:
        try:
            time_zone(zone)
        except ValueError as error:
            sys.stderr.write(f"san-web users set-time-zone: error: {error}\n")
            return 2
    try:
        found = asyncio.run(
            _with_store(args.database_url, lambda s: s.set_time_zone(args.name, zone))
        )
    except (OSError, sa_exc.SQLAlchemyError) as error:
        return _database_error("set-time-zone", error)
    if not found:
        return _unknown_user("set-time-zone", args.name)
    where = zone or "san-web's --time-zone"
    print(f"the days of user {args.name} now end at --til-at in {where}")
    return 0


def _sessions(count: int) -> str:
    return f"{count} session" + ("" if count == 1 else "s")


def users_main(argv: Sequence[str], *, default_database_url: str) -> int:
    """Run ``san-web users ...``; the exit code."""
    args = build_users_parser(default_database_url).parse_args(argv)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "set-role": set_role_main,
        "set-time-zone": set_time_zone_main,
        "passwd": passwd_main,
        "end-sessions": end_sessions_main,
        "delete": delete_main,
    }
    if args.command in commands:
        return commands[args.command](args)
    password, problem = _new_password(args.name)
    if problem is not None:
        sys.stderr.write(f"san-web users create: error: {problem}\n")
        return 2
    try:
        asyncio.run(_create(args.database_url, args.name, hash_password(password), args.role))
    except UserExistsError:
        sys.stderr.write(f"san-web users create: error: user {args.name!r} already exists\n")
        return 1
    except (OSError, sa_exc.SQLAlchemyError) as error:
        return _database_error("create", error)
    print(f"created user {args.name}" + (f" ({args.role})" if args.role != DEFAULT_ROLE else ""))
    return 0
