"""The OpenAPI document of the REST API (tools/openapi.py -> proto/cronwheel/v1/openapi.json) is
generated from the protos, committed fresh, valid, and follows a change of the protos (issue 51)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from cronwheel.cluster.api.rest import Routes

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("grpc_tools", reason="grpcio-tools (dev extra) compiles the protos")


def _load_openapi() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cronwheel_openapi", ROOT / "tools" / "openapi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


openapi = _load_openapi()


@pytest.fixture(scope="module")
def rendered() -> str:
    return str(openapi.render())


def test_committed_document_is_what_the_protos_generate(rendered: str) -> None:
    assert openapi.OUTPUT.read_text() == rendered, "run `python tools/openapi.py` and commit the result"
    assert openapi.main(["--check"]) == 0


def test_document_passes_openapi_spec_validator(rendered: str) -> None:
    from openapi_spec_validator import validate

    validate(json.loads(rendered))


def test_every_rpc_the_transcoder_serves_is_one_operation_of_the_document(rendered: str) -> None:
    doc = json.loads(rendered)
    ops = {(verb.upper(), path): op["operationId"] for path, item in doc["paths"].items() for verb, op in item.items()}
    routes = Routes()
    assert routes.missing == [], f"RPCs without a google.api.http route: {routes.missing}"
    served = {(r.verb, r.template): r.method.removeprefix("/cronwheel.v1.").replace("/", "_") for r in routes.all}
    assert ops == served


def test_field_added_in_a_test_build_appears_and_the_freshness_check_fails(tmp_path: Path, rendered: str) -> None:
    build = tmp_path / "proto"
    shutil.copytree(ROOT / "proto" / "cronwheel", build / "cronwheel",
                    ignore=shutil.ignore_patterns("*.py", "*.pyi", "*.json", "__pycache__"))
    common = build / "cronwheel" / "v1" / "common.proto"
    text = common.read_text()
    anchor = "message Schedule {\n"
    assert anchor in text
    common.write_text(text.replace(anchor, anchor + "  // A field of the test build.\n  string"
                                   " owner_team_for_test = 999;\n", 1))
    changed = json.loads(openapi.render(build))
    schedule = changed["components"]["schemas"]["Schedule"]["properties"]
    assert schedule["owner_team_for_test"] == {"type": "string", "description": "A field of the test build."}
    assert "owner_team_for_test" not in json.loads(rendered)["components"]["schemas"]["Schedule"]["properties"]
    # The freshness check fails until the document regenerated from the changed protos is committed.
    committed = tmp_path / "openapi.json"
    shutil.copyfile(openapi.OUTPUT, committed)
    assert not openapi.is_fresh(build, committed)
    committed.write_text(openapi.render(build))
    assert openapi.is_fresh(build, committed)
