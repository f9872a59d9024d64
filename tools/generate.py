"""Generate the Python stubs of the cronwheel.v1 gRPC contract.

    python tools/generate.py            # regenerate proto/cronwheel/v1/*_pb2*.py[i] in place

Runs grpc_tools.protoc (from grpcio-tools) over every proto/cronwheel/v1/*.proto with
`-I proto`, grpc_tools' bundled include directory (google/protobuf/*.proto) and the one of
googleapis-common-protos (google/api/annotations.proto: the HTTP routes), producing
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
from typing import Any

PROTO_ROOT = Path(__file__).resolve().parent.parent / "proto"
PACKAGE_DIR = PROTO_ROOT / "cronwheel" / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def proto_files(root: Path = PROTO_ROOT) -> list[Path]:
    """The .proto sources of the contract under `root` (PROTO_ROOT, or a test build's copy), sorted."""
    return sorted((Path(root) / "cronwheel" / "v1").glob("*.proto"))


def is_generated(path: Path) -> bool:
    """Whether a file name is one protoc produces for this package."""
    return path.name.endswith(GENERATED_SUFFIXES)


def include_dirs() -> list[Path]:
    """The -I directories besides PROTO_ROOT: the well-known types (grpc_tools) and the
    googleapis protos (`google.api.http`, from googleapis-common-protos)."""
    import grpc_tools
    from google.api import annotations_pb2  # googleapis-common-protos, a dependency of grpcio-status

    googleapis = Path(annotations_pb2.__file__).resolve().parents[2]  # .../site-packages
    return [Path(grpc_tools.__file__).resolve().parent / "_proto", googleapis]


def descriptor_set(root: Path = PROTO_ROOT, *extra: str) -> Any:
    """Every .proto under `root`/cronwheel/v1 compiled into a google.protobuf.FileDescriptorSet,
    with the files it imports (`extra`: more protoc flags, e.g. --include_source_info). `root` is
    PROTO_ROOT, or a copy of it (a test build); tools/openapi.py and the stub tests read this."""
    from google.protobuf import descriptor_pb2

    with tempfile.TemporaryDirectory(prefix="cronwheel-protoc-") as tmp:
        out = Path(tmp) / "contract.pb"
        _protoc(root, *extra, f"--descriptor_set_out={out}")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _protoc(root: Path, *flags: str) -> None:
    """protoc over every .proto under `root` with the include path of this contract."""
    from grpc_tools import protoc  # build-time dependency (grpcio-tools)

    sources = proto_files(root)
    if not sources:
        raise RuntimeError(f"no .proto files in {Path(root) / 'cronwheel' / 'v1'}")
    args = ["grpc_tools.protoc", f"-I{root}", *(f"-I{d}" for d in include_dirs()), *flags, *(str(p) for p in sources)]
    rc = protoc.main(args)
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc}: {' '.join(args)}")


def generate(out_dir: Path = PACKAGE_DIR) -> list[Path]:
    """Generate the stubs into `out_dir` (the directory that receives the modules themselves).

    Generated files in `out_dir` that no .proto produces any more are removed. Returns the
    paths of the generated files, sorted.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cronwheel-protoc-") as tmp:
        _protoc(PROTO_ROOT, f"--python_out={tmp}", f"--pyi_out={tmp}", f"--grpc_python_out={tmp}")
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
