"""What a module of the project imports, followed through the project's own modules,
read from the source with `ast` (nothing is imported): for tests that keep a layer
free of another (the domain free of gRPC and protobuf).

Every import statement counts, wherever it stands (in a function, under
TYPE_CHECKING): a layer that needs a name only for typing still knows of it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The project is everything under san_jobs but the generated code (san_jobs.proto).
PROJECT_PACKAGES = ("san_jobs",)
# The wire: gRPC, protobuf, google.rpc statuses, and the code generated from proto/.
WIRE_MODULES = (
    "grpc",
    "grpc_status",
    "grpc_health",
    "grpc_reflection",
    "google.protobuf",
    "google.rpc",
    "san_jobs.proto",
)


def module_file(module: str) -> Path | None:
    """The source file of a project module (its __init__.py for a package), or None."""
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_name(path: Path) -> str:
    parts = list(path.resolve().relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(module: str) -> bool:
    found = module_file(module)
    return found is not None and found.name == "__init__.py"


def direct_imports(module: str) -> set[str]:
    """The modules `module`'s source names in its import statements (for
    `from package import name`, the submodule `package.name` when there is one)."""
    path = module_file(module)
    assert path is not None, module
    package = module if _is_package(module) else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            found.add(base)
            for alias in node.names:
                if module_file(f"{base}.{alias.name}") is not None:
                    found.add(f"{base}.{alias.name}")
    return found


def _is_project(module: str) -> bool:
    return _is_under(module, PROJECT_PACKAGES) and not _is_under(module, WIRE_MODULES)


def _parents(module: str) -> list[str]:
    """The packages whose __init__ runs before `module` does."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _is_under(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def forbidden_imports(start: str, forbidden: Iterable[str] = WIRE_MODULES) -> list[str]:
    """Each way `start` reaches a `forbidden` module, through project modules, as
    "start -> a -> b -> grpc"; empty when there is none."""
    forbidden = tuple(forbidden)
    paths: list[str] = []
    seen: set[str] = set()
    pending: list[tuple[str, tuple[str, ...]]] = [(start, (start,))]
    while pending:
        module, chain = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        for name in sorted(direct_imports(module)):
            if _is_under(name, forbidden):
                paths.append(" -> ".join([*chain, name]))
            elif _is_project(name) and module_file(name) is not None:
                for step in [*_parents(name), name]:
                    pending.append((step, (*chain, step)))
    return sorted(paths)
