"""`job-service`: serve JobService (the default), or `job-service migrate`.

Every flag is a field of `JobServiceSettings` and has its environment variable
(SAN_JOBS_<FLAG>); a flag wins over its variable. Bad values end the program with one
line on stderr and exit code 2 (san_jobs.shared.cli_settings).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from san_jobs.job_service.settings import JobServiceSettings
from san_jobs.shared.cli_settings import SettingsParser, settings_of
from san_jobs.shared.event_loop import run
from san_jobs.shared.safe_text import safe_text


def build_parser() -> SettingsParser:
    parser = SettingsParser(
        prog="job-service",
        description="JobService: durable background AI jobs over gRPC.",
        epilog="Run `job-service migrate --database-url URL` to apply database migrations only "
        "(before a rolling deploy; a start applies only those that running instances of "
        "the older version can run beside, unless --no-migrate-on-start). Bearer tokens: "
        "`job-service tokens create NAME --role ROLE`, `job-service tokens list`, "
        "`job-service tokens revoke NAME`.",
        settings=JobServiceSettings,
    )
    parser.add_argument("command", nargs="?", choices=["serve", "migrate"], default="serve")
    return parser


def load_settings(argv: Sequence[str]) -> JobServiceSettings:
    """The settings from the environment and the flags in ``argv``; a bad value exits
    with status 2 and one line on stderr."""
    return settings_of(build_parser().parse_args(argv), JobServiceSettings)


def main(argv: Sequence[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments[:1] == ["tokens"]:
        from san_jobs.job_service.auth.commands import tokens_main

        raise SystemExit(tokens_main(arguments[1:]))
    args = build_parser().parse_args(arguments)
    settings = settings_of(args, JobServiceSettings)
    from san_jobs.job_service import server  # heavy imports after the flags are known to be good

    try:
        if args.command == "migrate":
            run(server.migrate_only(settings), settings.event_loop)
        else:
            run(server.serve(settings), settings.event_loop)
    except server.StartupError as error:
        print(safe_text(f"job-service: {error}"), file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
