"""`cronwheel apply -f schedules.yaml [--dry-run] [--prune]`: declarative schedules from a file,
reconciled by name through `Client.apply` (cronwheel.client.apply has the semantics).

    tenant: acme                      # optional; --tenant gives it too (they must agree)
    schedules:
      - name: nightly-report
        cron: "0 3 * * *"             # quote crons: `*` and `@` start YAML aliases and tags
        timezone: Europe/Berlin
        job_type: report
        misfire_policy: run_once
        payload: {format: pdf}
        retry_policy: {max_attempts: 3, initial_backoff: 30s}
        jitter: 5m

Admins may add a `tenants:` list (each `id` plus create_tenant's keyword arguments: max_concurrency,
rate_per_s, burst, weight, max_schedules, max_executions_per_day; cronwheel.client.apply_tenants
has the semantics), applied before the schedules; a file may have only `tenants:`.

Each schedule's keys are create_schedule's keyword arguments (docs/apply.md lists them). Prints
the plan (create / update with the changed fields / unchanged / delete), then applies it unless
--dry-run. A file that cannot be read, is not YAML, or has a bad spec exits 2 with
`FILE:LINE: schedules[i].field (schedule 'name'): what is wrong`, and nothing is changed.

Exposes `add_parser(subparsers)` (the cronwheel.cli convention).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

from cronwheel.cli.flags import client_for, connection_flags
from cronwheel.cli.main import EXIT_OK, EXIT_USAGE, fail

HELP = "create, update (and with --prune delete) a tenant's schedules to match a YAML file"
DEFAULT_ADDRESS = "127.0.0.1:7070"
TOP_KEYS = ("tenant", "schedules", "tenants")


class BadFile(Exception):
    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


@dataclass
class Marks:
    """Where a mapping of the file is: its own line and each key's (1-based)."""

    line: int
    keys: dict[str, int] = field(default_factory=dict)
    nested: dict[str, Marks] = field(default_factory=dict)

    def of(self, dotted: str) -> int:
        """The line of a key path ("retry_policy.max_attempts"), as deep as the file has it."""
        head, _, rest = dotted.partition(".")
        if rest and head in self.nested:
            return self.nested[head].of(rest)
        return self.keys.get(head, self.line)


@dataclass
class Loaded:
    """A file, read: its tenant, its schedule specs and tenant specs, and where each spec is."""

    tenant: str | None
    specs: list[dict[str, Any]]
    marks: list[Marks]
    tenants: list[dict[str, Any]]
    tenant_marks: list[Marks]
    has_schedules: bool = True  # the file has a `schedules:` key (an empty list prunes everything)


def load(text: str) -> tuple[str | None, list[dict[str, Any]], list[Marks]]:
    """The file's tenant, its schedule specs (plain values) and where each spec is (BadFile)."""
    f = load_file(text)
    return f.tenant, f.specs, f.marks


def load_file(text: str) -> Loaded:
    """The whole file (BadFile): `schedules:` and/or `tenants:` (admins: tenants' limits)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[str, Any]:
        loader.flatten_mapping(node)
        out: dict[str, Any] = {}
        marks = Marks(node.start_mark.line + 1)
        for k, v in node.value:
            key = loader.construct_object(k, deep=True)
            if key in out:
                raise BadFile(k.start_mark.line + 1, f"duplicate key {key!r}")
            out[key] = loader.construct_object(v, deep=True)
            marks.keys[str(key)] = k.start_mark.line + 1
            if isinstance(v, yaml.MappingNode):
                marks.nested[str(key)] = where[id(out[key])]
        where[id(out)] = marks
        keep.append(out)  # ids stay unique while the file is read
        return out

    where: dict[int, Marks] = {}
    keep: list[Any] = []
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        doc = yaml.load(text, Loader=Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(str(exc.problem or exc.context or "not YAML").split())
        if isinstance(exc, yaml.scanner.ScannerError):
            problem += " (quote values that start with * & @ or contain ': ', e.g. cron: \"*/5 * * * *\")"
        raise BadFile(mark.line + 1 if mark else None, f"not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise BadFile(None, f"not valid YAML: {exc}") from None
    if not isinstance(doc, dict) or ("schedules" not in doc and "tenants" not in doc):
        raise BadFile(1, "expected a mapping with a `schedules:` list (and optionally `tenant:`, `tenants:`)")
    top = where[id(doc)]
    for key in doc:
        if key not in TOP_KEYS:
            raise BadFile(top.keys.get(str(key)), f"{key}: unknown key (expected {' or '.join(TOP_KEYS)})")
    tenant = doc.get("tenant")
    if tenant is not None and not isinstance(tenant, str):
        raise BadFile(top.keys["tenant"], f"tenant: expected text, got {tenant!r}")
    lists: dict[str, list[dict[str, Any]]] = {}
    for key, what in (("schedules", "schedule"), ("tenants", "tenant")):
        items = doc.get(key) or []
        if not isinstance(items, list):
            first = "name" if key == "schedules" else "id"
            raise BadFile(top.keys[key], f"{key}: expected a list of {what}s (`- {first}: ...`)")
        for i, spec in enumerate(items):
            if not isinstance(spec, dict):
                raise BadFile(top.keys[key], f"{key}[{i}]: expected a mapping of {what} fields, got {spec!r}")
        lists[key] = items
    specs, tenants = lists["schedules"], lists["tenants"]
    return Loaded(tenant, specs, [where[id(s)] for s in specs], tenants, [where[id(s)] for s in tenants],
                  "schedules" in doc)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--file", required=True, help="the YAML file of schedules ('-': standard input)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--prune", action="store_true", help="also delete the tenant's schedules the file does not name")
    p.add_argument("--tenant", default=None, help="the tenant (default: the file's `tenant:`, else the token's)")
    connection_flags(p)


def run(args: argparse.Namespace) -> int:
    from cronwheel.client import SpecError

    name = "<stdin>" if args.file == "-" else args.file
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file, encoding="utf-8").read()  # noqa: SIM115
    except (OSError, UnicodeDecodeError) as exc:
        return fail(f"cannot read {name}: {getattr(exc, 'strerror', None) or exc}", EXIT_USAGE)
    try:
        f = load_file(text)
    except BadFile as exc:
        return fail(f"{name}:{exc.line}: {exc.message}" if exc.line else f"{name}: {exc.message}", EXIT_USAGE)
    tenant, specs, marks = f.tenant, f.specs, f.marks
    if args.tenant and tenant and args.tenant != tenant:
        return fail(f"--tenant {args.tenant} but {name} says tenant: {tenant}", EXIT_USAGE)
    from cronwheel.client import TenantSpecError
    from cronwheel.client.apply import check_specs as check_schedules
    from cronwheel.client.apply_tenants import check_specs as check_tenants
    from cronwheel.client.calls import Context

    with client_for(args) as cw:
        try:  # every spec of both lists checked before anything changes; tenants first (their quotas)
            check_tenants(f.tenants)
            check_schedules(Context(cw.clock), specs, args.tenant or tenant)
            tplan = cw.apply_tenants(f.tenants, dry_run=args.dry_run) if f.tenants else None
            plan = cw.apply(specs, tenant=args.tenant or tenant, prune=args.prune,
                            dry_run=args.dry_run) if f.has_schedules else None
        except (SpecError, TenantSpecError) as exc:
            kind, ms = ("tenant", f.tenant_marks) if isinstance(exc, TenantSpecError) else ("schedule", marks)
            line = ms[exc.index].of(exc.key) if exc.key else ms[exc.index].line
            where = f"{kind}s[{exc.index}]" + (f".{exc.key}" if exc.key else "")
            who = f" ({kind} {exc.name!r})" if exc.name else ""
            return fail(f"{name}:{line}: {where}{who}: {exc.detail}", EXIT_USAGE)
    for p in (tplan, plan):
        if p is not None:
            print(p.render())
    return EXIT_OK


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """`apply` on a subparsers object (argparse's add_subparsers()); its handler is `run`."""
    p: argparse.ArgumentParser = subparsers.add_parser("apply", help=HELP, description=HELP)
    configure(p)
    p.set_defaults(handler=run)
    return p
