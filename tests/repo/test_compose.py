"""docker-compose.yml and the Dockerfile agree with the code they run.

Every cronwheel service's command must be a real subcommand whose flags the CLI's own parser
accepts (`cronwheel.cli.main.build_parser()`), the etcd members must form one cluster, the nodes and
workers must point at services that exist, and the host ports must not clash.

Why a purpose-built parser: it reads docker-compose.yml exactly, and refuses what YAML 1.1 and
1.2 (and so PyYAML and Docker Compose) would read differently, so the file stays in a small subset
of YAML:

- block mappings (`key: value`, or `key:` with a more-indented block under it) and block
  sequences (`- value`, or `- key: value` starting a mapping), indented with spaces;
- plain scalars: strings of [A-Za-z0-9_./@+=,:-] (no `: `, no ` #`), decimal integers, `true`,
  `false`, `null`; words YAML 1.1 and 1.2 read differently (`yes`, `no`, `on`, `off`, `07`,
  `12:30`, dates) are refused, so they must be quoted;
- everything else is JSON, which is also YAML: double-quoted strings and flow collections
  (`[...]`, `{...}`), which may span lines;
- `#` comments. No anchors, aliases, tags, block scalars, single quotes or multiple documents.

That keeps the file readable (a JSON compose file would be valid but unpleasant) and unambiguous.
PyYAML (a dependency since `cronwheel apply`) must read the file exactly as `parse_compose` does.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from cronwheel.cli.main import UsageError, build_parser

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

ETCD = ("etcd1", "etcd2", "etcd3")
NODES = ("node1", "node2", "node3")
WORKERS = ("worker1", "worker2", "http-doer")  # http-doer: `worker --http` (issue 50)
ONE_SHOT = ("migrate", "auth-init", "key-init")


# ------------------------------------------------------------------------------ the subset parser


class SubsetError(ValueError):
    """The text uses YAML this parser does not read (or is not YAML at all)."""


@dataclass
class _Line:
    indent: int
    text: str
    number: int


_KEY = re.compile(r"^([A-Za-z0-9_.-]+):(?: +(.*))?$")
_PLAIN = re.compile(r"^[A-Za-z0-9_./@+=,][A-Za-z0-9_./@+=,:-]*$")
_AMBIGUOUS = re.compile(
    r"^(?:y|n|yes|no|on|off)$"  # booleans in YAML 1.1
    r"|^[-+]?0[0-9]+$|^[-+]?0[xob]"  # octal / hex / binary
    r"|^[-+]?[0-9][0-9_]*(?::[0-9]+)+(?:\.[0-9]*)?$"  # sexagesimal (YAML 1.1), and look-alikes: 22:22
    r"|^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"  # timestamps
    r"|^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$|^[-+]?\.(?:inf|nan)$",  # floats
    re.IGNORECASE,
)


def _strip_comment(text: str, in_string: bool = False) -> tuple[str, bool]:
    """The line without its `#` comment (a `#` at the start or after a blank, outside JSON
    strings); also whether a JSON string is still open at its end (an error for us)."""
    escaped = False
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip(), False
    return text.rstrip(), in_string


def _depth(text: str) -> int:
    """Open brackets minus closed ones, outside JSON strings."""
    depth, in_string, escaped = 0, False, False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
    return depth


def _logical_lines(source: str) -> list[_Line]:
    """Non-empty lines with comments removed; a flow collection spanning lines becomes one."""
    out: list[_Line] = []
    raw = source.splitlines()
    i = 0
    while i < len(raw):
        number, line = i + 1, raw[i]
        i += 1
        if "\t" in line:
            raise SubsetError(f"line {number}: tab character (indent with spaces)")
        text, open_string = _strip_comment(line)
        if open_string:
            raise SubsetError(f"line {number}: unterminated string")
        if not text.strip():
            continue
        indent = len(text) - len(text.lstrip(" "))
        text = text.strip()
        if text in ("---", "...") or text.startswith("%"):
            raise SubsetError(f"line {number}: documents and directives are not in the subset")
        value = _value_part(text)
        if value is not None and value[:1] in "[{":
            while _depth(value) > 0:
                if i >= len(raw):
                    raise SubsetError(f"line {number}: flow collection never closed")
                more, open_string = _strip_comment(raw[i])
                if open_string:
                    raise SubsetError(f"line {i + 1}: a string may not span lines")
                if more.strip() and len(more) - len(more.lstrip(" ")) <= indent:
                    raise SubsetError(f"line {i + 1}: continuation must be indented more than its key")
                text += " " + more.strip()
                value += " " + more.strip()
                i += 1
        out.append(_Line(indent, text, number))
    return out


def _value_part(text: str) -> str | None:
    """The scalar part of a line: after `- `, after `key: `, or None for `key:`."""
    while text.startswith("- "):
        text = text[2:].lstrip(" ")
    m = _KEY.match(text)
    if m:
        return m.group(2)
    return text


def _scalar(text: str, number: int) -> Any:
    if text[:1] in ('"', "[", "{"):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise SubsetError(f"line {number}: not JSON: {exc}") from None
    if text in ("true", "false"):
        return text == "true"
    if text in ("null", "~"):
        return None
    if re.fullmatch(r"-?[1-9][0-9]*|0", text):
        return int(text)
    if _AMBIGUOUS.search(text):
        raise SubsetError(f"line {number}: {text!r} means different things in YAML 1.1 and 1.2: quote it")
    if not _PLAIN.match(text):  # also refuses anchors, aliases, tags, block scalars, single quotes
        raise SubsetError(f"line {number}: {text!r} is not a plain scalar of the subset: quote it as JSON")
    return text


def _mapping(lines: list[_Line], i: int, indent: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    while i < len(lines) and lines[i].indent == indent:
        line = lines[i]
        m = _KEY.match(line.text)
        if not m:
            raise SubsetError(f"line {line.number}: expected `key: value` or `key:`, got {line.text!r}")
        key, rest = m.group(1), m.group(2)
        if key in out:
            raise SubsetError(f"line {line.number}: duplicate key {key!r}")
        i += 1
        if rest is not None:
            out[key] = _scalar(rest, line.number)
        elif i < len(lines) and lines[i].indent > indent:
            out[key], i = _block(lines, i)
        else:
            out[key] = None
    if i < len(lines) and lines[i].indent > indent:
        raise SubsetError(f"line {lines[i].number}: unexpected indentation")
    return out, i


def _sequence(lines: list[_Line], i: int, indent: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    while i < len(lines) and lines[i].indent == indent and lines[i].text.startswith("-"):
        line = lines[i]
        if not line.text.startswith("- ") or line.text[2:3] == " ":
            raise SubsetError(f"line {line.number}: write sequence items as `- value`")
        rest = line.text[2:]
        if _KEY.match(rest):  # `- key: value` starts a mapping indented by the dash and a blank
            lines[i] = _Line(indent + 2, rest, line.number)
            item, i = _mapping(lines, i, indent + 2)
        else:
            item, i = _scalar(rest, line.number), i + 1
        out.append(item)
    if i < len(lines) and lines[i].indent > indent:
        raise SubsetError(f"line {lines[i].number}: unexpected indentation")
    return out, i


def _block(lines: list[_Line], i: int) -> tuple[Any, int]:
    indent = lines[i].indent
    if lines[i].text.startswith("-"):
        return _sequence(lines, i, indent)
    return _mapping(lines, i, indent)


def parse_compose(source: str) -> dict[str, Any]:
    """The document, read with the subset's rules (see the module docstring)."""
    lines = _logical_lines(source)
    if not lines:
        raise SubsetError("empty document")
    if lines[0].indent != 0:
        raise SubsetError(f"line {lines[0].number}: the document must start at column 0")
    doc, i = _mapping(lines, 0, 0)
    if i != len(lines):
        raise SubsetError(f"line {lines[i].number}: unexpected content")
    return doc


# ------------------------------------------------------------------------------ fixtures and helpers


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    assert COMPOSE.is_file(), "docker-compose.yml is missing at the repository root"
    return parse_compose(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def flags(argv: list[str]) -> dict[str, str]:
    """`--flag value` and `--flag=value` pairs of a command line (flags without a value: "")."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            if "=" in arg:
                k, v = arg.split("=", 1)
                out[k] = v
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[arg] = argv[i + 1]
                i += 1
            else:
                out[arg] = ""
        i += 1
    return out


def cronwheel_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Services that run the cronwheel image (its ENTRYPOINT is `cronwheel`)."""
    return {n: s for n, s in services.items() if "build" in s or str(s.get("image", "")).startswith("cronwheel")}


def static_ips(services: dict[str, dict[str, Any]]) -> dict[str, str]:
    """service name -> its fixed address on the default network, for the services that have one."""
    out = {}
    for name, s in services.items():
        nets = s.get("networks")
        if isinstance(nets, dict):
            for cfg in nets.values():
                if isinstance(cfg, dict) and "ipv4_address" in cfg:
                    out[name] = str(cfg["ipv4_address"])
    return out


def parse_cli(argv: list[str]) -> Any:
    try:
        return build_parser().parse_args(argv)
    except UsageError as exc:
        pytest.fail(f"`cronwheel {' '.join(argv)}` is refused by the CLI: {exc}")
    except SystemExit as exc:  # argparse --help/--version paths; never expected here
        pytest.fail(f"`cronwheel {' '.join(argv)}` exited ({exc.code})")


# ------------------------------------------------------------------------------ the subset parser itself


def test_subset_parser_reads_blocks_flows_and_comments() -> None:
    doc = parse_compose(
        "a:  # comment\n"
        "  b: plain-value:1.2  # trailing\n"
        '  c: ["x # not a comment", 2,\n'
        '       {"d": null}]\n'
        "  e:\n"
        "    - 7\n"
        "    - f: g\n"
        "      h: true\n"
        "  i: {}\n"
    )
    assert doc == {"a": {"b": "plain-value:1.2", "c": ["x # not a comment", 2, {"d": None}],
                         "e": [7, {"f": "g", "h": True}], "i": {}}}


@pytest.mark.parametrize("text", [
    "a: &anchor x\n", "a: *alias\n", "a: !tag x\n", "a: |\n  x\n", "a: 'single'\n", "a: yes\n", "a: no\n",
    "a: 07\n", "a: 22:22\n", "a: 7071:7070\n", "a: 2024-01-01\n", "a: 1.5\n", "a:\n\t- x\n", "a: b: c\n",
    "a: 1\na: 2\n", "---\na: 1\n", 'a: ["open"\n', "a:\n  - b\n   - c\n",
])
def test_subset_parser_refuses_what_it_does_not_read_exactly(text: str) -> None:
    with pytest.raises(SubsetError):
        parse_compose(text)


def test_pyyaml_reads_the_compose_file_as_the_subset_parser_does() -> None:
    import yaml  # a dependency since `cronwheel apply` reads YAML

    text = COMPOSE.read_text()
    assert yaml.safe_load(text) == parse_compose(text)


# ------------------------------------------------------------------------------ the compose file


def test_compose_has_the_production_shape(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == {*ETCD, "postgres", *ONE_SHOT, *NODES, *WORKERS}
    for name in ETCD:
        assert re.fullmatch(r"quay\.io/coreos/etcd:v3\.5\.\d+", services[name]["image"]), name
    assert re.fullmatch(r"postgres:16(\.\d+)*", services["postgres"]["image"])
    for name, s in services.items():
        if name not in ONE_SHOT:
            assert "healthcheck" in s or name in WORKERS, f"{name} has no health check"
            assert s.get("restart") == "unless-stopped", f"{name} should come back after a crash"
    for name in ONE_SHOT:
        assert services[name].get("restart") == "no", f"{name} is one-shot"


def test_every_cronwheel_command_is_accepted_by_the_cli(services: dict[str, dict[str, Any]]) -> None:
    ours = cronwheel_services(services)
    assert set(ours) == {*ONE_SHOT, *NODES, *WORKERS}
    expected = {"migrate": "migrate", "auth-init": "token", "key-init": "secrets", **dict.fromkeys(NODES, "node"),
                **dict.fromkeys(WORKERS, "worker")}
    for name, s in ours.items():
        argv = s["command"]
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv), \
            f"{name}: write the command as a list of strings (exec form)"
        args = parse_cli(argv)  # an unknown subcommand or flag fails here, naming it
        assert args.command == expected[name], name


def test_every_node_encrypts_stored_secrets_with_the_key_key_init_makes_once(
    services: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Issue 48, item 4: every node seals stored secrets with the key ring `key-init` makes before
    any node starts, so `docker compose up` needs no hand-made key. key-init's real command runs
    here, twice (a second `up` keeps the key: a new one would orphan every stored secret)."""
    from cronwheel.cli.main import main
    from cronwheel.secret_store import load_keys

    init = services["key-init"]
    volume = {v.split(":")[0]: v.split(":")[1] for v in init["volumes"]}["auth"]
    key_file = flags(init["command"][2:])["--key-file"]
    assert key_file.startswith(volume + "/")
    for name in NODES:
        s = services[name]
        assert flags(s["command"][1:]).get("--secret-key-file") == key_file, f"{name}: --secret-key-file {key_file}"
        assert f"auth:{volume}:ro" in s["volumes"]
        assert s["depends_on"]["key-init"]["condition"] == "service_completed_successfully"
    local = [f"{tmp_path}/{a.removeprefix(volume + '/')}" if a.startswith(volume + "/") else a
             for a in init["command"]]
    assert main(local) == 0
    made = tmp_path / key_file.removeprefix(volume + "/")
    assert made.stat().st_mode & 0o077 == 0, "the key file is the owner's only"
    ring = load_keys(str(made), env={})
    assert ring is not None
    first = made.read_text()
    assert main(local) == 0, "a second `up` keeps the key the first made"
    assert made.read_text() == first


def test_health_checks_run_real_commands(services: dict[str, dict[str, Any]]) -> None:
    for name, s in services.items():
        hc = s.get("healthcheck")
        if hc is None:
            continue
        test = hc["test"]
        assert isinstance(test, list) and test[0] == "CMD", f"{name}: use the exec form [\"CMD\", ...]"
        argv = test[1:]
        if argv[0] == "cronwheel":
            parse_cli(argv[1:])
        if argv[:2] == ["python", "-c"]:
            compile(argv[2], f"<{name} healthcheck>", "exec")
            assert "127.0.0.1:7070" in argv[2], f"{name}: the check must probe the node's own --listen port"
            assert "grpc_health" in argv[2]


def test_every_depends_on_names_a_service_and_a_fitting_condition(services: dict[str, dict[str, Any]]) -> None:
    for name, s in services.items():
        deps = s.get("depends_on", {})
        items = deps.items() if isinstance(deps, dict) else ((d, {}) for d in deps)
        for dep, cfg in items:
            assert dep in services, f"{name} depends on unknown service {dep!r}"
            assert dep != name
            cond = (cfg or {}).get("condition", "service_started")
            if cond == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy, but it has no check"
            elif cond == "service_completed_successfully":
                assert services[dep].get("restart") == "no", f"{dep} must be one-shot for {name} to wait for it"
            else:
                assert cond == "service_started", f"{name}: unknown condition {cond!r}"
    for node in NODES:
        assert services[node]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert all(e in services[node]["depends_on"] for e in ETCD)
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_etcd_members_form_one_cluster_of_three(services: dict[str, dict[str, Any]]) -> None:
    ips = static_ips(services)
    clusters = []
    for name in ETCD:
        f = flags(services[name]["command"][1:])
        assert f["--name"] == name
        assert f["--initial-cluster-state"] == "new"
        members = dict(entry.split("=", 1) for entry in f["--initial-cluster"].split(","))
        assert set(members) == set(ETCD), f"{name}: --initial-cluster must list all three members"
        assert members[name] == f["--initial-advertise-peer-urls"], f"{name}: its own entry must be its peer URL"
        for member, url in members.items():
            host = urlsplit(url).hostname
            assert host in (member, ips.get(member)), f"{name}: {member}'s peer URL {url} points elsewhere"
            assert urlsplit(url).port == 2380
        clusters.append((f["--initial-cluster"], f["--initial-cluster-token"]))
    assert len(set(clusters)) == 1, "every member must be started with the same cluster and token"


def test_nodes_and_workers_point_at_services_that_exist(services: dict[str, dict[str, Any]]) -> None:
    ips = static_ips(services)
    etcd_hosts = {h: n for n in ETCD for h in (n, ips.get(n)) if h}
    dsns, node_ids, advertised = set(), set(), {}
    etcd_source = (ROOT / "cluster" / "coordination" / "etcd.py").read_text()
    for name in NODES:
        f = flags(services[name]["command"][1:])
        dsns.add(f["--dsn"])
        node_ids.add(f["--node-id"])
        hosts = [e.rsplit(":", 1)[0] for e in f["--etcd"].split(",")]
        assert {etcd_hosts.get(h) for h in hosts} == set(ETCD), f"{name}: --etcd must name each etcd member"
        if '"ipv4:"' in etcd_source:  # the node dials etcd through gRPC's ipv4: resolver: IP literals only
            for h in hosts:
                ipaddress.ip_address(h)
        host, port = f["--advertise"].rsplit(":", 1)
        assert host == name, f"{name}: --advertise must be reachable by peers and workers as {name}"
        assert port == f["--listen"].rsplit(":", 1)[1]
        assert f["--listen"].startswith("0.0.0.0:") and f["--metrics-listen"].startswith("0.0.0.0:")
        advertised[f["--advertise"]] = name
        container_ports = {p.rsplit(":", 1)[1] for p in services[name]["ports"]}
        assert {port, f["--metrics-listen"].rsplit(":", 1)[1]} <= container_ports, f"{name}: publish API and metrics"
    dsns.add(flags(services["migrate"]["command"][1:])["--dsn"])
    assert len(dsns) == 1, "migrate and every node must use the same database"
    assert urlsplit(dsns.pop()).hostname == "postgres"
    assert len(node_ids) == len(NODES), "node ids must be unique"
    worker_ids = set()
    for name in WORKERS:
        f = flags(services[name]["command"][2:])
        assert f["--address"] in advertised, f"{name}: --address must be a node's advertised address"
        assert advertised[f["--address"]] in services[name]["depends_on"]
        worker_ids.add(f["--worker-id"])
    assert len(worker_ids) == len(WORKERS), "worker ids must be unique (they become lease owners)"


def test_auth_is_on_for_every_node_and_its_token_reaches_every_worker(
    services: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Issue 48, item 5: every node listens beyond loopback, so every node has an auth file (the
    node itself refuses to start otherwise), made by `auth-init` before any node starts and
    holding the token the workers are given. auth-init's real command runs here, twice (a second
    `docker compose up`), with the volume's path moved to tmp_path."""
    from cronwheel.cli.main import main
    from cronwheel.cluster.api.auth import load_auth
    from cronwheel.token_format import hash_token

    init = services["auth-init"]
    volume = {v.split(":")[0]: v.split(":")[1] for v in init["volumes"]}["auth"]
    init_flags = flags(init["command"])
    auth_file, token_file = init_flags["--auth-file"], init_flags["--token-file"]
    assert auth_file.startswith(volume + "/") and token_file.startswith(volume + "/")
    for name in NODES:
        s = services[name]
        f = flags(s["command"][1:])
        assert "--insecure" not in f, f"{name}: no --insecure in the compose file"
        assert f.get("--auth-file") == auth_file, f"{name}: --auth-file {auth_file} (auth on for every node)"
        assert f"auth:{volume}:ro" in s["volumes"], f"{name}: mount the auth volume read-only"
        assert s["depends_on"]["auth-init"]["condition"] == "service_completed_successfully"
    for name in WORKERS:
        s = services[name]
        assert flags(s["command"][2:]).get("--token-file") == token_file, f"{name}: --token-file {token_file}"
        assert f"auth:{volume}:ro" in s["volumes"]
    local = [f"{tmp_path}/{a.removeprefix(volume + '/')}" if a.startswith(volume + "/") else a
             for a in init["command"]]
    assert main(local) == 0
    token = (tmp_path / "admin.token").read_text().strip()
    assert (tmp_path / "admin.token").stat().st_mode & 0o077 == 0, "the token file is the owner's only"
    callers = load_auth(str(tmp_path / "auth.json")).tokens
    assert callers[hash_token(token)].admin
    assert main(local) == 0, "a second `up` keeps what the first made"
    assert (tmp_path / "admin.token").read_text().strip() == token
    assert load_auth(str(tmp_path / "auth.json")).tokens == callers


def test_etcd_addresses_are_fixed_outside_the_dynamic_range(compose: dict[str, Any]) -> None:
    (ipam,) = compose["networks"]["default"]["ipam"]["config"]
    subnet, dynamic = ipaddress.ip_network(ipam["subnet"]), ipaddress.ip_network(ipam["ip_range"])
    ips = static_ips(compose["services"])
    assert set(ips) == set(ETCD)
    for name, ip in ips.items():
        addr = ipaddress.ip_address(ip)
        assert addr in subnet and addr not in dynamic, f"{name}: {ip} could be handed to another container"
    assert len(set(ips.values())) == len(ips)


def test_published_host_ports_are_unique(services: dict[str, dict[str, Any]]) -> None:
    seen: dict[str, str] = {}
    for name, s in services.items():
        for mapping in s.get("ports", []):
            assert isinstance(mapping, str) and re.fullmatch(r"\d+:\d+", mapping), \
                f"{name}: write ports as \"HOST:CONTAINER\" strings, got {mapping!r}"
            host = mapping.split(":")[0]
            assert host not in seen, f"host port {host} is published by both {seen[host]} and {name}"
            seen[host] = name
    assert set(seen.values()) == set(NODES), "the nodes' API and metrics ports are published"


def test_volumes_used_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes", {}))
    for name, s in compose["services"].items():
        for v in s.get("volumes", []):
            source = v.split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name} mounts undeclared volume {source!r}"


# ------------------------------------------------------------------------------ the Dockerfile


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with `\\` continuations joined and comments dropped."""
    out, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        word, _, rest = current.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def test_dockerfile_installs_the_package_and_runs_cronwheel_unprivileged() -> None:
    assert DOCKERFILE.is_file(), "Dockerfile is missing at the repository root"
    ins = _instructions(DOCKERFILE.read_text())
    assert ins[0] == ("FROM", "python:3.11-slim")
    runs = " ".join(arg for word, arg in ins if word == "RUN")
    assert re.search(r"\bpip install \.", runs), "the image installs the package with pip"
    entrypoints = [arg for word, arg in ins if word == "ENTRYPOINT"]
    assert entrypoints and json.loads(entrypoints[-1]) == ["cronwheel"], "ENTRYPOINT must be [\"cronwheel\"]"
    users = [arg for word, arg in ins if word == "USER"]
    assert users and users[-1] not in ("root", "0"), "the image must run as a non-root user"
    copied = {arg.split()[0] for word, arg in ins if word == "COPY"}
    pyproject = (ROOT / "pyproject.toml").read_text()
    for folder in re.findall(r'"cronwheel[.\w]*" = "(\w+)', pyproject):
        assert folder.split("/")[0] in copied, f"the image must COPY {folder}/ (pyproject.toml maps it)"
