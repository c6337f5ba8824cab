"""``san-web users create NAME --database-url URL``: a login for the page, its password
read from standard input (typed without echo on a terminal), stored as an argon2 hash.

Exit codes: 0 made; 1 the name is taken or the database cannot be reached; 2 a bad
name or an empty password.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import Sequence

import sqlalchemy.exc as sa_exc

from clients.web._passwords import hash_password, password_problem, username_problem
from clients.web._store import ScrapStore, UserExistsError


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


async def _create(database_url: str, name: str, password_hash: str) -> None:
    store = await ScrapStore.open(database_url)
    try:
        await store.add_user(name, password_hash)
    finally:
        await store.close()


def users_main(argv: Sequence[str], *, default_database_url: str) -> int:
    """Run ``san-web users ...``; the exit code."""
    args = build_users_parser(default_database_url).parse_args(argv)
    password = ""
    problem = username_problem(args.name)
    if problem is None:
        password = read_password()
        problem = password_problem(password)
    if problem is not None:
        sys.stderr.write(f"san-web users create: error: {problem}\n")
        return 2
    try:
        asyncio.run(_create(args.database_url, args.name, hash_password(password)))
    except UserExistsError:
        sys.stderr.write(f"san-web users create: error: user {args.name!r} already exists\n")
        return 1
    except (OSError, sa_exc.SQLAlchemyError) as error:
        sys.stderr.write(
            f"san-web users create: error: cannot use the database: {type(error).__name__}\n"
        )
        return 1
    print(f"created user {args.name}")
    return 0
