"""The contract: buf lint, buf breaking against the released baseline, and the
generated code in san_jobs/proto/ being exactly what `make proto` produces."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.ci import skip_or_fail_in_ci

ROOT = Path(__file__).resolve().parents[2]
BUF = ROOT / "node_modules" / ".bin" / "buf"


def _buf() -> str:
    if BUF.exists():
        return str(BUF)
    found = shutil.which("buf")
    if found is None:
        skip_or_fail_in_ci(
            "the buf CLI is missing: `make install` runs `npm install` (@bufbuild/buf)"
        )
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def test_buf_lint_passes() -> None:
    result = _run(_buf(), "lint")
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_config_has_no_lint_exceptions() -> None:
    config = (ROOT / "buf.yaml").read_text()
    assert "STANDARD" in config and "FILE" in config
    assert "except" not in config and "ignore" not in config


def test_contract_is_backward_compatible_with_baseline() -> None:
    result = _run(_buf(), "breaking", "--against", "contract/baseline.binpb")
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_breaking_catches_a_breaking_change(tmp_path: Path) -> None:
    """The check above is only worth something if it fails on a real break."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "proto", copy / "proto")
    shutil.copytree(ROOT / "third_party", copy / "third_party")
    shutil.copy(ROOT / "buf.yaml", copy / "buf.yaml")
    proto = copy / "proto" / "san" / "jobs" / "v1" / "job_service.proto"
    proto.write_text(proto.read_text().replace("string target_id = 4;", "string target_ref = 4;"))
    result = subprocess.run(
        [_buf(), "breaking", "--against", str(ROOT / "contract" / "baseline.binpb")],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "target_id" in result.stdout + result.stderr


def _tree(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    out = tmp_path / "proto"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    generated = ROOT / "san_jobs" / "proto"
    committed = _tree(generated)
    fresh = _tree(out)
    assert committed == fresh, f"files differ: {sorted(committed ^ fresh)}; run `make proto`"
    stale = [
        name
        for name in sorted(fresh)
        if not filecmp.cmp(out / name, generated / name, shallow=False)
    ]
    assert not stale, f"stale generated files {stale}: run `make proto` and commit them"


def test_generated_packages_import_without_path_tricks() -> None:
    code = (
        "from san_jobs.proto.jobs.v1 import job_service_pb2, job_service_pb2_grpc;"
        "from san_jobs.proto.aigateway.v1 import ai_gateway_pb2, ai_gateway_pb2_grpc;"
        "print(job_service_pb2.JobType.Name(1), ai_gateway_pb2_grpc.AiGatewayServiceStub.__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["JOB_TYPE_CARD_ANALYSIS", "AiGatewayServiceStub"]


def test_every_proto_element_has_a_doc_comment() -> None:
    """Doc comments are the API docs: buf's COMMENTS rules, run on top of STANDARD."""
    config = (
        "version: v2\nmodules:\n  - path: proto\n"
        # Google's vendored file is only imported; its comments are not ours to check.
        "  - path: third_party/googleapis\n    lint:\n      use:\n        - MINIMAL\n"
        "lint:\n  use:\n    - COMMENTS\n"
    )
    result = _run(_buf(), "lint", "--config", config)
    assert result.returncode == 0, result.stdout + result.stderr


def test_vendored_google_rpc_status_is_the_installed_one() -> None:
    """third_party/ holds Google's status.proto unmodified, the very file whose Python
    module (googleapis-common-protos' google.rpc.status_pb2) the generated code imports."""
    from google.rpc import status_pb2

    installed = Path(status_pb2.__file__).with_name("status.proto")
    vendored = ROOT / "third_party" / "googleapis" / "google" / "rpc" / "status.proto"
    assert vendored.read_bytes() == installed.read_bytes()


def test_make_test_runs_lint_before_the_tests() -> None:
    """CI runs `make test` only: style, typing and buf must hold on every landing."""
    if shutil.which("make") is None:
        skip_or_fail_in_ci("make is missing")
    result = _run("make", "-n", "test")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # The line that runs the tests; a collection (--collect-only, which runs none, to
    # write the test modules' bytecode) may run beside mypy on the line before it.
    pytest_at = next(
        i for i, line in enumerate(lines) if "bin/pytest" in line and "--collect-only" not in line
    )
    before = "\n".join(lines[:pytest_at])
    for step in ("buf lint", "buf breaking", "ruff check", "ruff format --check", "bin/mypy"):
        assert step in before, f"`make test` does not run {step!r} before pytest"
