"""Generate the Python stubs of the cronwheel.v1 gRPC contract.

    python tools/generate.py            # regenerate proto/cronwheel/v1/*_pb2*.py[i] in place

Runs grpc_tools.protoc (from grpcio-tools) over every proto/cronwheel/v1/*.proto with
`-I proto` and grpc_tools' bundled include directory (google/protobuf/*.proto), producing
`*_pb2.py`, `*_pb2.pyi` and `*_pb2_grpc.py`. The generated modules import each other as
`cronwheel.v1.<name>_pb2`, which matches the package `cronwheel.v1` that pyproject.toml maps to
proto/cronwheel/v1. The generated files are committed; tests/repo/test_proto_stubs.py fails
when they are stale.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent.parent / "proto"
PACKAGE_DIR = PROTO_ROOT / "cronwheel" / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def proto_files() -> list[Path]:
    """The .proto sources of the contract, sorted."""
    return sorted(PACKAGE_DIR.glob("*.proto"))


def is_generated(path: Path) -> bool:
    """Whether a file name is one protoc produces for this package."""
    return path.name.endswith(GENERATED_SUFFIXES)


def generate(out_dir: Path = PACKAGE_DIR) -> list[Path]:
    """Generate the stubs into `out_dir` (the directory that receives the modules themselves).

    Generated files in `out_dir` that no .proto produces any more are removed. Returns the
    paths of the generated files, sorted.
    """
    import grpc_tools
    from grpc_tools import protoc  # build-time dependency (grpcio-tools)

    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"

    sources = proto_files()
    if not sources:
        raise RuntimeError(f"no .proto files in {PACKAGE_DIR}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cronwheel-protoc-") as tmp:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *(str(p) for p in sources),
        ]
        rc = protoc.main(args)
        if rc != 0:
            raise RuntimeError(f"protoc failed with exit code {rc}: {' '.join(args)}")
        produced_dir = Path(tmp) / "cronwheel" / "v1"
        produced = sorted(p for p in produced_dir.iterdir() if is_generated(p))
        names = {p.name for p in produced}
        for old in out_dir.iterdir():
            if is_generated(old) and old.name not in names:
                old.unlink()
        result = []
        for p in produced:
            dest = out_dir / p.name
            shutil.copyfile(p, dest)
            result.append(dest)
    return result


def main() -> int:
    for path in generate(PACKAGE_DIR):
        try:
            shown = path.relative_to(Path.cwd())
        except ValueError:
            shown = path
        print(shown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
