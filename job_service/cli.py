"""`job-service`: serve JobService (the default), or `job-service migrate`.

Every flag has an environment variable (SAN_JOBS_<FLAG>); a flag wins over its
variable. Bad values end the program with one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from job_service.event_loop import run
from job_service.settings import ENV_PREFIX, JobServiceSettings
from san_shared.safe_text import safe_text

# flag -> (settings field, type, help)
FLAGS: list[tuple[str, str, type[Any], str]] = [
    ("--listen", "listen", str, "HOST:PORT to serve on (default 127.0.0.1:50051)"),
    (
        "--database-url",
        "database_url",
        str,
        "SQLAlchemy async URL (default sqlite+aiosqlite:///var/jobs.db)",
    ),
    ("--gateway", "gateway", str, "AiGateway HOST:PORT (default 127.0.0.1:50052)"),
    ("--workers", "workers", int, "jobs in flight at once (default 10)"),
    ("--lease", "lease", float, "claim lease, seconds (default 60)"),
    ("--max-attempts", "max_attempts", int, "attempts before FAILED (default 3)"),
    ("--retry-base-delay", "retry_base_delay", float, "first retry delay, seconds (default 2)"),
    ("--retry-max-delay", "retry_max_delay", float, "longest retry delay, seconds (default 300)"),
    (
        "--deadline",
        "deadline",
        float,
        "gateway deadline for all job types, seconds (default per type: 30/60/60)",
    ),
    ("--poll-interval", "poll_interval", float, "fallback poll for due jobs, seconds (default 1)"),
    (
        "--batch-interval",
        "batch_interval",
        float,
        "under load, shortest time between two claims or enqueue commits, seconds (default 0.002)",
    ),
    ("--grace", "grace", float, "shutdown grace for in-flight jobs, seconds (default 30)"),
    ("--max-text-chars", "max_text_chars", int, "longest input text accepted (default 100000)"),
    (
        "--max-message-bytes",
        "max_message_bytes",
        int,
        "largest gRPC message received or sent, bytes (default 4194304, 4 MiB)",
    ),
    ("--max-streams", "max_streams", int, "StreamJobUpdates streams open at once (default 10000)"),
    (
        "--max-streams-per-peer",
        "max_streams_per_peer",
        int,
        "streams open at once from one client address (default 2000)",
    ),
    (
        "--max-streams-per-connection",
        "max_streams_per_connection",
        int,
        "streams open at once on one client connection (default 2000)",
    ),
    ("--max-feeds", "max_feeds", int, "live feeds (streams without job ids) open (default 100)"),
    ("--max-feeds-per-peer", "max_feeds_per_peer", int, "live feeds from one address (default 10)"),
    ("--instance-id", "instance_id", str, "name of this instance in logs and notifications"),
    ("--log-level", "log_level", str, "DEBUG, INFO, WARNING or ERROR (default INFO)"),
    ("--event-loop", "event_loop", str, "uvloop or asyncio (default uvloop)"),
    ("--tls-cert", "tls_cert", Path, "serve TLS with this PEM certificate (chain)"),
    ("--tls-key", "tls_key", Path, "PEM private key of --tls-cert"),
    (
        "--tls-client-ca",
        "tls_client_ca",
        Path,
        "mutual TLS: require client certificates signed by this PEM CA",
    ),
    ("--gateway-tls-ca", "gateway_tls_ca", Path, "call the gateway over TLS, trusting this CA"),
    (
        "--gateway-tls-cert",
        "gateway_tls_cert",
        Path,
        "mutual TLS to the gateway: this PEM client certificate",
    ),
    ("--gateway-tls-key", "gateway_tls_key", Path, "PEM private key of --gateway-tls-cert"),
    (
        "--gateway-token-file",
        "gateway_token_file",
        Path,
        "send the bearer token in this file on every gateway call (its --caller-tokens-file)",
    ),
    (
        "--insecure",
        "insecure",
        bool,
        "listen beyond loopback without TLS and authentication (takes no value)",
    ),
    (
        "--auth",
        "auth",
        str,
        "off, or token: every RPC but health needs a bearer token "
        "(default off on loopback, token on any other address)",
    ),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="job-service",
        description="JobService: durable background AI jobs over gRPC.",
        epilog="Run `job-service migrate --database-url URL` to apply database migrations only "
        "(serving applies them at start too). Bearer tokens: `job-service tokens create NAME "
        "--role ROLE`, `job-service tokens list`, `job-service tokens revoke NAME`.",
    )
    parser.add_argument("command", nargs="?", choices=["serve", "migrate"], default="serve")
    for flag, field, kind, text in FLAGS:
        env = ENV_PREFIX + field.upper()
        if kind is bool:  # a switch: given means true; its variable takes true/false
            parser.add_argument(
                flag, dest=field, action="store_const", const=True, help=f"{text} [env {env}]"
            )
            continue
        parser.add_argument(flag, dest=field, type=kind, default=None, help=f"{text} [env {env}]")
    return parser


def load_settings(args: argparse.Namespace) -> JobServiceSettings:
    overrides = {
        field: getattr(args, field) for _, field, _, _ in FLAGS if getattr(args, field) is not None
    }
    return JobServiceSettings(**overrides)


def _one_line(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"])
        if not field:  # a check across fields: its message names the flags
            parts.append(str(item["msg"]))
            continue
        flag = "--" + field.replace("_", "-")
        parts.append(f"{flag} (env {ENV_PREFIX}{field.upper()}): {item['msg']}")
    # A message may quote the value given (a database URL): mask its password.
    return safe_text("job-service: invalid settings: " + "; ".join(parts))


def main(argv: Sequence[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments[:1] == ["tokens"]:
        from job_service.auth.commands import tokens_main

        raise SystemExit(tokens_main(arguments[1:]))
    args = build_parser().parse_args(arguments)
    try:
        settings = load_settings(args)
    except ValidationError as error:
        print(_one_line(error), file=sys.stderr)
        raise SystemExit(2) from None
    from job_service import server  # heavy imports after the flags are known to be good

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
