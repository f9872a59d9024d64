"""Declarative tenants: `Client.apply_tenants(specs, dry_run=False)` reconciles tenants BY ID with
a list of specs (the `tenants:` list of a `cronwheel apply` file), as `apply` does schedules.

    plan = cw.apply_tenants([{"id": "acme", "rate_per_s": 100, "weight": 3, "max_schedules": 50}])
    print(plan.render())   # + create    tenant acme / Tenants: 1 to create, 0 to update, 0 unchanged.

A spec is a mapping of `id` and create_tenant's keyword arguments (max_concurrency, rate_per_s,
burst, weight, max_schedules, max_executions_per_day, egress_rules: a list of HOST_GLOB or
HOST_GLOB:PORT, where its HTTP targets may point). Semantics, precisely:
- a key a spec leaves out is not managed (the server's default on create, unchanged on update);
- `null` clears rate_per_s (no rate limit), burst (one second's worth) or a quota (no quota);
  it is refused for max_concurrency and weight;
- the plan is `create` (the tenant has no row), `update` (the fields that differ, old -> new,
  applied with one update_tenant) or `unchanged`; tenants are never deleted by apply;
- every spec's keys and types are checked before anything changes (TenantSpecError naming
  `tenants[i].key`); the ranges are the server's (INVALID_ARGUMENT at write time, naming the
  field), so an out-of-range value stops apply at that tenant, the ones before it applied;
- applying the same specs twice changes nothing the second time;
- `queues` (a mapping of queue name to `{max_concurrency: N or null, weight: N}`) sets those
  queues' limits (set_tenant_queue): each listed queue is one field `queues.<name>`, compared
  whole ((max_concurrency, weight); a key left out is null / 1); queues not listed are left as
  they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterable, Mapping
from typing import Any

from . import calls
from . import types as t
from .apply import Action, FieldChange, Plan
from .errors import ApiError, InvalidArgument

KEYS = (*calls.TENANT_INTS, *calls.TENANT_OPTIONAL, "egress_rules", "queues")  # besides "id"
QUEUE_KEYS = ("max_concurrency", "weight")


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedTenant:
    """One entry of a tenant plan; `tenant`: after a real apply, the tenant as stored."""

    action: Action
    id: str
    changes: tuple[FieldChange, ...] = ()
    index: int | None = None
    tenant: t.Tenant | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class TenantPlan(Plan):
    items: tuple[PlannedTenant, ...]
    applied: bool

    def render(self) -> str:
        return self._render(lambda i: f"tenant {i.id}",
                            f"Tenants: {self.count('create')} to create, {self.count('update')} to update, "
                            f"{self.count('unchanged')} unchanged.")


class TenantSpecError(InvalidArgument):
    """A tenant spec refused before anything changes: `.index`, `.name` (its id), `.key`;
    `.field` is `tenants[<index>].<key>`."""

    def __init__(self, index: int, name: str | None, key: str, detail: str) -> None:
        self.index, self.name, self.key, self.detail = index, name, key, detail
        where = f"tenants[{index}]" + (f".{key}" if key else "")
        who = f" (tenant {name!r})" if name else ""
        InvalidArgument.__init__(self, "INVALID_ARGUMENT", f"{where}{who}: {detail}")
        self.field = where


@dataclasses.dataclass(frozen=True, slots=True)
class _Desired:
    index: int
    id: str
    values: dict[str, Any]
    queues: dict[str, tuple[int | None, int]] = dataclasses.field(default_factory=dict)


def check_specs(specs: Iterable[Mapping[str, Any]]) -> list[_Desired]:
    out: list[_Desired] = []
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if not isinstance(spec, Mapping):
            raise TenantSpecError(i, None, "", f"expected a mapping of tenant fields, got {spec!r}")
        ident = spec.get("id")
        name = ident.strip() if isinstance(ident, str) else None
        for key in spec:
            if key != "id" and key not in KEYS:
                raise TenantSpecError(i, name, str(key), f"unknown key (expected id or one of {', '.join(KEYS)})")
        if not name:
            raise TenantSpecError(i, None, "id", "required: the tenant's name")
        if name in seen:
            raise TenantSpecError(i, name, "id", f"the same id as tenants[{seen[name]}]")
        seen[name] = i
        values = {k: v for k, v in spec.items() if k not in ("id", "queues")}
        try:  # the client's own checks (types): the request update_tenant would send
            calls.tenant_message(name, values)
        except InvalidArgument as exc:
            raise TenantSpecError(i, name, exc.field, str(exc).partition(": ")[2] or str(exc)) from None
        out.append(_Desired(i, name, {k: float(v) if k in ("rate_per_s", "burst") and v is not None
                                      else tuple(v or ()) if k == "egress_rules" else v
                                      for k, v in values.items()}, _queues(i, name, spec.get("queues"))))
    return out


def _queues(i: int, name: str, queues: Any) -> dict[str, tuple[int | None, int]]:
    """A spec's `queues`, checked for shape and type: name -> (max_concurrency, weight)."""
    if queues is None:
        return {}
    if not isinstance(queues, Mapping):
        raise TenantSpecError(i, name, "queues", f"expected a mapping of queue name to limits, got {queues!r}")
    out: dict[str, tuple[int | None, int]] = {}
    for q, limits in queues.items():
        where = f"queues.{q}"
        if not isinstance(q, str) or not q or not isinstance(limits, Mapping):
            raise TenantSpecError(i, name, where, f"expected a queue name and a mapping of {', '.join(QUEUE_KEYS)}")
        for key in limits:
            if key not in QUEUE_KEYS:
                raise TenantSpecError(i, name, f"{where}.{key}",
                                      f"unknown key (expected one of {', '.join(QUEUE_KEYS)})")
        weight = limits.get("weight")
        try:  # the client's own checks (types): the request set_tenant_queue would send
            calls.tenant_queue_message(q, limits.get("max_concurrency"), weight)
        except InvalidArgument as exc:
            raise TenantSpecError(i, name, f"{where}.{exc.field}", str(exc).partition(": ")[2] or str(exc)) from None
        out[q] = (limits.get("max_concurrency"), 1 if weight is None else weight)
    return out


def _queue_changes(have: Mapping[str, tuple[int | None, int]], d: _Desired) -> tuple[FieldChange, ...]:
    """The queues of `d` whose limits differ from `have` (absent: no limits set)."""
    return tuple(FieldChange(f"queues.{q}", have.get(q), want) for q, want in sorted(d.queues.items())
                 if have.get(q) != want)


def apply_tenants(ctx: calls.Context, specs: Iterable[Mapping[str, Any]], *,
                  dry_run: bool = False) -> calls.Steps[TenantPlan]:
    """Reconciles tenants by id with `specs` (each `{"id": ..., <create_tenant keyword>: ...}`):
    creates the missing, updates those that differ (only the keys a spec gives; null clears a
    rate or quota). With `dry_run`, changes nothing. Returns the TenantPlan (`render()`: the text
    `cronwheel apply` prints). Admin tokens only. Applying the same specs twice changes nothing."""
    desired = check_specs(specs)
    return calls.Steps(_reconcile(ctx, desired, dry_run))


Step = calls.Call[Any] | calls.Pages[Any]


def _reconcile(ctx: calls.Context, desired: list[_Desired], dry_run: bool) -> Generator[Step, Any, TenantPlan]:
    current: list[t.Tenant] = yield calls.list_tenants(ctx, page_size=1000)
    by_id = {x.id: x for x in current}
    plan: list[PlannedTenant] = []
    for d in desired:
        cur = by_id.get(d.id)
        if cur is None:
            plan.append(PlannedTenant(Action.CREATE, d.id, _queue_changes({}, d), index=d.index))
            continue
        have: dict[str, tuple[int | None, int]] = {}
        if d.queues:  # a tenant's queues come with get_tenant only
            full: t.Tenant = yield calls.get_tenant(ctx, d.id)
            have = {x.name: (x.max_concurrency, x.weight) for x in full.queues}
        changes = tuple(FieldChange(k, getattr(cur, k), v) for k, v in d.values.items() if getattr(cur, k) != v)
        changes += _queue_changes(have, d)
        plan.append(PlannedTenant(Action.UPDATE if changes else Action.UNCHANGED, d.id, changes, d.index, cur))
    if dry_run:
        return TenantPlan(tuple(plan), applied=False)
    done = []
    for item, d in zip(plan, desired, strict=True):
        try:
            fields = {ch.field: ch.new for ch in item.changes if not ch.field.startswith("queues.")}
            if item.action == Action.CREATE:
                made = yield calls.create_tenant(ctx, d.id, **d.values)
                item = dataclasses.replace(item, tenant=made)
            elif item.action == Action.UPDATE and fields:
                now = yield calls.update_tenant(ctx, d.id, **fields)
                item = dataclasses.replace(item, tenant=now)
            for ch in item.changes:
                if ch.field.startswith("queues."):
                    limit, weight = ch.new
                    yield calls.set_tenant_queue(ctx, d.id, ch.field.removeprefix("queues."),
                                                 max_concurrency=limit, weight=weight)
        except ApiError as exc:
            raise type(exc)(exc.code, f"tenants[{d.index}] ({d.id!r}): {item.action} refused: {exc}") from None
        done.append(item)
    return TenantPlan(tuple(done), applied=True)
