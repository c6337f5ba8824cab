"""Regenerate all Python code from proto/ into san_jobs/proto/ (or the folder given).

Usage: python scripts/gen_proto.py [OUT_DIR]

Writes message classes (*_pb2.py), gRPC stubs (*_pb2_grpc.py) and typed stubs
for both (*.pyi, by mypy-protobuf), plus the __init__.py files that make the
output an importable package tree under the one import root: proto/san/jobs/v1/
becomes `san_jobs.proto.jobs.v1`, proto/san/aigateway/v1/ `san_jobs.proto.aigateway.v1`
(the proto packages on the wire stay `san.jobs.v1` and `san.aigateway.v1`). protoc
writes absolute imports of the proto packages (`from san.jobs.v1 import ...`); they
are rewritten to relative ones, as protoletariat does (protoletariat itself requires
protobuf < 6, older than the generated code needs). The output folder is emptied
first, so a deleted .proto leaves nothing behind.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
# Imported, not generated: google/rpc/status.proto. Its Python module is the one
# googleapis-common-protos installs (google.rpc.status_pb2).
THIRD_PARTY_DIR = ROOT / "third_party" / "googleapis"
DEFAULT_OUT = ROOT / "san_jobs" / "proto"
# The proto tree's root package, dropped from the Python layout (san/jobs/v1 -> jobs/v1).
PROTO_ROOT_PACKAGE = "san"
_PROTO_IMPORT = re.compile(rf"^from {PROTO_ROOT_PACKAGE}((?:\.\w+)+) import ", re.MULTILINE)


def _plugin(name: str) -> str:
    """Path of a protoc plugin installed beside this Python (mypy-protobuf)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        found = shutil.which(name)
        if found is None:
            raise SystemExit(f"{name} not found: install the dev extras (pip install -e '.[dev]')")
        return found
    return str(path)


def _relative_imports(module: Path, out_dir: Path) -> None:
    """`from san_jobs.proto.jobs.v1 import x` -> `from . import x` (or `from ..other.v1`)."""
    package = module.parent.relative_to(out_dir).parts

    def relative(match: re.Match[str]) -> str:
        target = match.group(1).lstrip(".").split(".")
        shared = 0
        while shared < min(len(package), len(target)) and package[shared] == target[shared]:
            shared += 1
        dots = "." * (len(package) - shared + 1)
        return f"from {dots}{'.'.join(target[shared:])} import "

    text = module.read_text(encoding="utf-8")
    module.write_text(_PROTO_IMPORT.sub(relative, text), encoding="utf-8")


def generate(out_dir: Path) -> None:
    if out_dir.exists():
        shutil.rmtree(out_dir)
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    well_known = str(resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory() as scratch:
        args = [
            "grpc_tools.protoc",
            f"--proto_path={PROTO_DIR}",
            f"--proto_path={THIRD_PARTY_DIR}",
            f"--proto_path={well_known}",
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--python_out={scratch}",
            f"--grpc_python_out={scratch}",
            f"--mypy_out={scratch}",
            f"--mypy_grpc_out={scratch}",
            *protos,
        ]
        code = protoc.main(args)
        if code != 0:
            raise SystemExit(f"protoc failed with exit code {code}")
        shutil.copytree(Path(scratch) / PROTO_ROOT_PACKAGE, out_dir)
    for module in sorted(out_dir.rglob("*.py*")):
        _relative_imports(module, out_dir)
    # protoc writes modules but no packages; every folder becomes a regular package.
    for folder in [out_dir, *(p for p in out_dir.rglob("*") if p.is_dir())]:
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text(
                '"""Generated from proto/ by scripts/gen_proto.py (make proto): do not edit."""\n'
                if folder == out_dir
                else ""
            )


def main() -> None:
    out_dir = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else DEFAULT_OUT
    generate(out_dir)
    print(f"generated Python code from {PROTO_DIR.relative_to(ROOT)}/ into {out_dir}")


if __name__ == "__main__":
    main()
