"""Regenerate all Python code from proto/ into gen/ (or the folder given).

Usage: python scripts/gen_proto.py [OUT_DIR]

Writes message classes (*_pb2.py), gRPC stubs (*_pb2_grpc.py) and typed stubs
for both (*.pyi, by mypy-protobuf), plus the __init__.py files that make the
output an importable package tree (`san.jobs.v1`, `san.aigateway.v1`). The
output folder is emptied first, so a deleted .proto leaves nothing behind.
"""

from __future__ import annotations

import shutil
import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
# Imported, not generated: google/rpc/status.proto. Its Python module is the one
# googleapis-common-protos installs (google.rpc.status_pb2).
THIRD_PARTY_DIR = ROOT / "third_party" / "googleapis"
DEFAULT_OUT = ROOT / "gen"


def _plugin(name: str) -> str:
    """Path of a protoc plugin installed beside this Python (mypy-protobuf)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        found = shutil.which(name)
        if found is None:
            raise SystemExit(f"{name} not found: install the dev extras (pip install -e '.[dev]')")
        return found
    return str(path)


def generate(out_dir: Path) -> None:
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    well_known = str(resources.files("grpc_tools") / "_proto")
    args = [
        "grpc_tools.protoc",
        f"--proto_path={PROTO_DIR}",
        f"--proto_path={THIRD_PARTY_DIR}",
        f"--proto_path={well_known}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *protos,
    ]
    code = protoc.main(args)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    # protoc writes modules but no packages; every folder becomes a regular package.
    for folder in [out_dir, *(p for p in out_dir.rglob("*") if p.is_dir())]:
        if folder != out_dir:
            (folder / "__init__.py").touch()
    (out_dir / "py.typed").touch()


def main() -> None:
    out_dir = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else DEFAULT_OUT
    generate(out_dir)
    print(f"generated Python code from {PROTO_DIR.relative_to(ROOT)}/ into {out_dir}")


if __name__ == "__main__":
    main()
