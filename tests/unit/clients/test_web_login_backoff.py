"""san-web's limits per client, with a clock the test moves: login attempts counted
before their password is checked, delays per (name, address) that double up to a cap,
IPv6 counted by /64, the connection caps, and which proxies are believed."""

from __future__ import annotations

import pytest

from san_jobs.web._client_address import TrustedProxies, address_key, parse_networks
from san_jobs.web._connection_limits import ConnectionLimits
from san_jobs.web._login_throttle import LoginAttempt, LoginThrottle, Throttled
from san_jobs.web._security_headers import wants_hsts
from san_jobs.web.cli import build_parser


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_attempts_under_way_count_before_their_password_is_checked() -> None:
    throttle = LoginThrottle(free_failures=5, clock=Clock())
    # 40 attempts at once: none has an answer yet when the next one arrives.
    attempts = [throttle.reserve("alice", "10.0.0.1") for _ in range(40)]
    admitted = [a for a in attempts if isinstance(a, LoginAttempt)]
    assert len(admitted) == 5
    assert all(a == Throttled(30) for a in attempts[5:])


def test_delays_double_from_the_last_failure_up_to_the_cap() -> None:
    clock = Clock()
    throttle = LoginThrottle(free_failures=5, max_failures_per_address=10**6, clock=clock)
    waits: list[int] = []
    for _ in range(12):
        attempt = throttle.reserve("alice", "10.0.0.1")
        while isinstance(attempt, Throttled):
            waits.append(attempt.retry_after)
            clock.now += attempt.retry_after
            attempt = throttle.reserve("alice", "10.0.0.1")
        attempt.failed()
    assert waits == [30, 60, 120, 240, 480, 900, 900]
    # The right password, once the wait is over, starts the pair afresh.
    clock.now += 900
    right = throttle.reserve("alice", "10.0.0.1")
    assert isinstance(right, LoginAttempt)
    right.succeeded()
    for _ in range(5):
        attempt = throttle.reserve("alice", "10.0.0.1")
        assert isinstance(attempt, LoginAttempt)
        attempt.failed()


def test_a_quiet_pair_is_forgotten() -> None:
    clock = Clock()
    throttle = LoginThrottle(free_failures=1, window=900, clock=clock)
    attempt = throttle.reserve("alice", "10.0.0.1")
    assert isinstance(attempt, LoginAttempt)
    attempt.failed()
    assert throttle.reserve("alice", "10.0.0.1") == Throttled(30)
    clock.now += 30 + 900 + 1
    assert isinstance(throttle.reserve("alice", "10.0.0.1"), LoginAttempt)
    assert len(throttle._pairs) == 1


def test_a_failure_that_ends_after_a_success_still_counts() -> None:
    throttle = LoginThrottle(free_failures=1, clock=Clock())
    wrong = throttle.reserve("alice", "10.0.0.1")
    right = throttle.reserve("alice", "10.0.0.2")  # another pair: both go ahead
    assert isinstance(wrong, LoginAttempt) and isinstance(right, LoginAttempt)
    right.succeeded()
    wrong.failed()
    assert isinstance(throttle.reserve("alice", "10.0.0.1"), Throttled)


@pytest.mark.parametrize(
    ("host", "key"),
    [("10.1.2.3", "10.1.2.3"), ("::ffff:10.1.2.3", "10.1.2.3"),
     ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"), ("2001:db8:1:2:ffff::9", "2001:db8:1:2::/64"),
     ("", ""), ("unix-socket", "unix-socket")],
)  # fmt: skip
def test_ipv6_clients_are_counted_by_their_64(host: str, key: str) -> None:
    assert address_key(host) == key


def test_one_ipv6_host_cannot_take_a_fresh_address_per_guess() -> None:
    throttle = LoginThrottle(free_failures=100, max_failures_per_address=3, clock=Clock())
    for index in range(3):
        attempt = throttle.reserve(f"name{index}", f"2001:db8::{index + 1}")
        assert isinstance(attempt, LoginAttempt)
        attempt.failed()
    assert isinstance(throttle.reserve("other", "2001:db8::ffff"), Throttled)


def test_connections_are_capped_per_address_and_in_all() -> None:
    limits = ConnectionLimits(max_total=5, max_per_address=2)
    held = [limits.admit("10.0.0.1"), limits.admit("10.0.0.1")]
    assert [refusal for _, refusal in held] == [None, None]
    assert limits.admit("10.0.0.1") == (None, "address")
    for index in range(3):
        assert limits.admit(f"10.0.0.{index + 2}")[1] is None
    assert limits.admit("10.0.0.9") == (None, "server")
    key, _ = held[0]
    assert key is not None
    limits.release(key)
    assert limits.from_address("10.0.0.1") == 1
    assert limits.admit("10.0.0.1")[1] is None


def test_a_trusted_proxy_is_held_only_by_the_total() -> None:
    proxies = TrustedProxies(parse_networks("10.0.0.0/30, 192.0.2.7"))
    limits = ConnectionLimits(max_total=4, max_per_address=1, trusted_proxies=proxies)
    assert [limits.admit("10.0.0.2")[1] for _ in range(4)] == [None] * 4
    assert limits.admit("10.0.0.2") == (None, "server")
    assert "::ffff:192.0.2.7" in proxies and "10.0.0.5" not in proxies
    assert proxies.uvicorn_list() == ["10.0.0.0/30", "192.0.2.7/32"]


def test_refusals_being_answered_are_bounded() -> None:
    limits = ConnectionLimits(max_total=2, max_per_address=1)
    assert limits.start_answering_refusal() and limits.start_answering_refusal()
    assert not limits.start_answering_refusal()  # closed at once instead
    limits.refusal_answered()
    assert limits.start_answering_refusal()


def test_trusted_proxies_must_be_addresses_or_networks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert build_parser().parse_args(["--trusted-proxies", "10.0.0.1,fd00::/8"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--trusted-proxies", "10.0.0.1,proxy.example"])
    assert "'proxy.example' is not an IP address or network" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("scheme", "host", "hsts"),
    [("https", "web.example:8443", True), ("https", "10.0.0.1", True),
     ("http", "web.example", False), ("https", "localhost:8443", False),
     ("https", "app.localhost", False)],
)  # fmt: skip
def test_hsts_over_https_except_to_localhost(scheme: str, host: str, hsts: bool) -> None:
    scope = {"type": "http", "scheme": scheme, "headers": [(b"host", host.encode())]}
    assert wants_hsts(scope) is hsts
