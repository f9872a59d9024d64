"""Declarative schedules: `Client.apply(specs, tenant=..., prune=False, dry_run=False)` reconciles a
tenant's schedules BY NAME with a list of specs, the way `kubectl apply` and `terraform plan` do.

    plan = cw.apply([{"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
                      "job_type": "report", "misfire_policy": "run_once", "jitter": "5m"}],
                    tenant="acme", dry_run=True)
    print(plan.render())   # + create nightly ... / Plan: 1 to create, 0 to update, 0 unchanged, 0 to delete.

A spec is a mapping of create_schedule's keyword arguments (less `tenant` and `id`), read off its
signature: a field added to create_schedule is a spec key with no change here. Values are plain:
durations as a timedelta, seconds, or text ("90s", "5m", "1h30m", "2d"); a RetryPolicy or
DstPolicy as a mapping of its fields; enums as their words.

The plan, one entry per name: `create` (no live schedule of that name in the tenant), `update`
(the fields that differ, old -> new), `unchanged`, and with `prune`, `delete` for the tenant's
schedules no spec names. Semantics, precisely:
- a key a spec leaves out is not managed: neither compared nor changed (the server's default on
  create); inside a retry_policy / dst_policy mapping, likewise per field;
- `null` resets a field to its default and is allowed only for fields a Schedule may leave unset
  (jitter, attempt_timeout, alert_if_no_success_within, payload); None, 0 s, {} and "" compare equal;
- `paused` is applied with pause / resume; the other changes with one update_schedule guarded by
  the version read for the plan (FailedPrecondition if the schedule changed meanwhile);
- every spec is checked before anything changes: unknown or missing keys, types, the client's
  checks of each value, and the server's check of the timing fields (cron, timezone, dst_policy,
  jitter) of each create and timing change through PreviewSchedule. A refusal raises SpecError
  naming the spec by index and name and the key (`specs[3].cron`). Only what the server alone
  checks at write time (e.g. a retry policy out of range) can stop apply part-way: the schedules
  before it are applied, and applying again after the fix does the rest;
- applying the same specs twice changes nothing the second time (every entry `unchanged`).

The reconcile is written once for Client and AsyncClient as a generator of calls (calls.Steps).
(A little over 400 lines: the spec checks, the diff and the reconcile are one concept.)
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Any

from . import calls
from . import convert as c
from . import types as t
from .errors import ApiError, InvalidArgument


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"
    DELETE = "delete"


@dataclasses.dataclass(frozen=True, slots=True)
class FieldChange:
    """One field an update changes: `field` is the spec key ("cron", "retry_policy.max_attempts")."""

    field: str
    old: Any
    new: Any


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedSchedule:
    """One entry of a plan. `index`: the spec's index (None for a delete); `schedule`: after a
    real apply, the schedule as stored (None for a delete and in a dry run's creates)."""

    action: Action
    name: str
    schedule_id: str | None
    changes: tuple[FieldChange, ...] = ()
    index: int | None = None
    schedule: t.Schedule | None = None


class Plan:
    """What an apply plan of any kind answers: its `items` (each with `action` and `changes`),
    `applied`, the counts, and the rendering `cronwheel apply` prints."""

    __slots__ = ()
    items: tuple[Any, ...]
    applied: bool

    def count(self, action: Action | str) -> int:
        return sum(1 for i in self.items if i.action == action)

    @property
    def changes(self) -> bool:
        """True when the plan creates, updates or deletes anything."""
        return any(i.action != Action.UNCHANGED for i in self.items)

    def _render(self, header: Callable[[Any], str], summary: str) -> str:
        marks = {Action.CREATE: "+", Action.UPDATE: "~", Action.UNCHANGED: "=", Action.DELETE: "-"}
        out = []
        for i in self.items:
            out.append(f"{marks[i.action]} {i.action:<9} {header(i)}")
            out += [f"      {ch.field}: {show(ch.old)} -> {show(ch.new)}" for ch in i.changes]
        verb = "" if self.applied else " (dry run: nothing changed)"
        out.append(f"{summary}{verb}")
        return "\n".join(out)


@dataclasses.dataclass(frozen=True, slots=True)
class ApplyPlan(Plan):
    """What apply found (and, unless `applied` is false, did): one entry per spec in order, then
    the deletes by name. `render()` is the text `cronwheel apply` prints."""

    tenant: str | None
    items: tuple[PlannedSchedule, ...]
    applied: bool

    def render(self) -> str:
        tenant = f" in tenant {self.tenant}" if self.tenant else ""
        return self._render(lambda i: f"{i.name}  ({i.schedule_id})" if i.schedule_id else i.name,
                            f"Plan{tenant}: {self.count('create')} to create, {self.count('update')} to update, "
                            f"{self.count('unchanged')} unchanged, {self.count('delete')} to delete.")


class SpecError(InvalidArgument):
    """A spec apply refuses before changing anything: `.index` and `.name` say which spec, `.key`
    which of its keys ("" for the spec as a whole, "retry_policy.max_attempts" inside a policy);
    `.field` is `specs[<index>].<key>`."""

    def __init__(self, index: int, name: str | None, key: str, detail: str) -> None:
        self.index, self.name, self.key, self.detail = index, name, key, detail
        where = f"specs[{index}]" + (f".{key}" if key else "")
        who = f" (schedule {name!r})" if name else ""
        InvalidArgument.__init__(self, "INVALID_ARGUMENT", f"{where}{who}: {detail}")
        self.field = where


# ------------------------------------------------------------------------------ spec keys


def _create_parameters() -> dict[str, inspect.Parameter]:
    params = dict(inspect.signature(calls.create_schedule).parameters)
    for key in ("ctx", "tenant", "id"):
        params.pop(key, None)
    return params


SPEC_KEYS: dict[str, inspect.Parameter] = _create_parameters()  # create_schedule's, less ctx, tenant, id
REQUIRED = tuple(k for k, p in SPEC_KEYS.items() if p.default is inspect.Parameter.empty)
_HINTS = typing.get_type_hints(calls.create_schedule)
_READ_BACK = typing.get_type_hints(t.Schedule)  # may a field be unset (Optional) when read?
TIMING = ("cron", "timezone", "dst_policy", "jitter")

_DURATION = re.compile(r"(\d+(?:\.\d*)?)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any) -> timedelta:
    """A timedelta, seconds (int or float), or text of number+unit parts: "90s", "1h30m", "250ms"."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        parts = _DURATION.findall(text)
        if parts and "".join(n + u for n, u in parts) == text:
            return timedelta(seconds=sum(float(n) * _UNIT_S[u] for n, u in parts))
    raise ValueError(f"expected a duration (seconds, or text like 90s, 5m, 1h30m, 2d), got {value!r}")


def _options(hint: Any) -> tuple[Any, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def _optional(hint: Any) -> bool:
    return hint is Any or type(None) in _options(hint)


def _convert(hint: Any, raw: Any, key: str) -> Any:
    """A plain spec value as the create_schedule argument of type `hint` (raises ValueError with
    the detail, KeyError(subkey) naming a nested key)."""
    if raw is None:
        return None
    opts = _options(hint)
    if timedelta in opts:
        return parse_duration(raw)
    for cls in opts:
        if dataclasses.is_dataclass(cls) and isinstance(cls, type):
            if isinstance(raw, cls):
                return raw
            if not isinstance(raw, Mapping):
                raise ValueError(f"expected a mapping of {', '.join(f.name for f in dataclasses.fields(cls))}, "
                                 f"got {raw!r}")
            sub_hints = typing.get_type_hints(cls)
            known = {f.name for f in dataclasses.fields(cls)}
            values = {}
            for sub, v in raw.items():
                if sub not in known:
                    raise _Nested(f"{key}.{sub}", f"unknown key (expected one of {', '.join(sorted(known))})")
                try:
                    values[sub] = _convert(sub_hints[sub], v, f"{key}.{sub}")
                except ValueError as exc:
                    raise _Nested(f"{key}.{sub}", str(exc)) from None
            return cls(**values)
    if Any in opts:
        return raw
    words = [o for o in opts if isinstance(o, type) and issubclass(o, StrEnum)]
    if words and str not in opts and isinstance(raw, str):  # a policy's enum field: its word
        try:
            return words[0](raw.strip())
        except ValueError:
            raise ValueError(f"expected one of {', '.join(m.value for m in words[0])}, got {raw!r}") from None
    plain = [o for o in opts if isinstance(o, type) and o is not type(None)]
    ok = any(isinstance(raw, o) and not (isinstance(raw, bool) and o in (int, float)) for o in plain)
    if plain and not ok:
        want = " or ".join(sorted({"text" if issubclass(o, str) else o.__name__ for o in plain}))
        raise ValueError(f"expected {want}, got {raw!r}")
    return raw


class _Nested(Exception):
    def __init__(self, key: str, detail: str) -> None:
        super().__init__(detail)
        self.key, self.detail = key, detail


@dataclasses.dataclass(frozen=True, slots=True)
class _Desired:
    index: int
    name: str
    values: dict[str, Any]  # create_schedule's keyword arguments, converted


def check_specs(ctx: calls.Context, specs: Iterable[Mapping[str, Any]], tenant: str | None) -> list[_Desired]:
    """Every spec converted and checked as far as the client can, before any call (SpecError)."""
    out: list[_Desired] = []
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if not isinstance(spec, Mapping):
            raise SpecError(i, None, "", f"expected a mapping of schedule fields, got {spec!r}")
        name = spec.get("name") if isinstance(spec.get("name"), str) else None
        for key in spec:
            if key not in SPEC_KEYS:
                raise SpecError(i, name, str(key), f"unknown key (expected one of {', '.join(SPEC_KEYS)})")
        if spec.get("target") is not None and not spec.get("job_type"):  # an HTTP target's: type "http"
            spec = {**spec, "job_type": "http"}
        for key in REQUIRED:
            if spec.get(key) is None:
                raise SpecError(i, name, key, "required")
        values: dict[str, Any] = {}
        for key, raw in spec.items():
            if raw is None and not _optional(_READ_BACK.get(key, Any)):
                raise SpecError(i, name, key, "null is not allowed here: give a value, or leave the key out "
                                              "to keep the schedule's")
            try:
                values[key] = _convert(_HINTS[key], raw, key)
            except _Nested as exc:
                raise SpecError(i, name, exc.key, exc.detail) from None
            except ValueError as exc:
                raise SpecError(i, name, key, str(exc)) from None
        assert name is not None  # required and checked above
        if name.strip() in seen:
            raise SpecError(i, name, "name", f"the same name as specs[{seen[name.strip()]}]: names are unique "
                                             "per tenant")
        seen[name.strip()] = i
        try:  # the client's own checks of every value: the request create_schedule would send
            calls.create_schedule(ctx, **values, tenant=tenant)
        except InvalidArgument as exc:
            raise SpecError(i, name, exc.field, str(exc).partition(": ")[2] or str(exc)) from None
        out.append(_Desired(i, name.strip(), values))
    return out


# ------------------------------------------------------------------------------ the diff


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, timedelta) and not v) or v == {} or v == "" or v == [] or v == ()


def same(desired: Any, current: Any) -> bool:
    if _blank(desired) or _blank(current):
        return _blank(desired) and _blank(current)
    if isinstance(desired, str) and isinstance(current, str):  # StrEnum members are their words
        return str(desired).strip() == str(current).strip()
    if isinstance(desired, list | tuple) and isinstance(current, list | tuple):  # capabilities: a set
        return sorted(set(desired)) == sorted(set(current))
    return bool(desired == current)


def diff(key: str, desired: Any, current: Any) -> list[FieldChange]:
    """The changes that make `current` (a Schedule's attribute) what the spec says; a policy's
    fields left None in the spec are not managed."""
    if dataclasses.is_dataclass(desired) and not isinstance(desired, type):
        out: list[FieldChange] = []
        for f in dataclasses.fields(desired):
            want = getattr(desired, f.name)
            if want is not None:
                out += diff(f"{key}.{f.name}", want, getattr(current, f.name, None))
        return out
    if isinstance(desired, Mapping) and isinstance(current, Mapping):  # a target: the keys it gives
        return [ch for k, v in desired.items() for ch in diff(f"{key}.{k}", v, current.get(k))]
    return [] if same(desired, current) else [FieldChange(key, current, desired)]


def _update_value(desired: Any, current: Any) -> Any:
    """What to send for a changed field: a policy keeps the fields the spec does not manage."""
    if dataclasses.is_dataclass(desired) and not isinstance(desired, type) and dataclasses.is_dataclass(current):
        keep = {f.name: getattr(desired, f.name) for f in dataclasses.fields(desired)
                if getattr(desired, f.name) is not None}
        return dataclasses.replace(current, **keep)  # type: ignore[type-var]
    if isinstance(desired, Mapping) and isinstance(current, Mapping):  # a target keeps the keys not given
        return {**current, **desired}
    return desired


def show(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, str):
        return repr(value)
    return c.json_text(value, "value") if isinstance(value, dict | list) else str(value)


def format_duration(d: timedelta) -> str:
    s = d.total_seconds()
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            n, s = divmod(s, size)
            out += f"{int(n)}{unit}"
    return out + (f"{s:g}s" if s or not out else "")


# ------------------------------------------------------------------------------ the reconcile


def apply(ctx: calls.Context, specs: Iterable[Mapping[str, Any]], *, tenant: str | None = None,
          prune: bool = False, dry_run: bool = False) -> calls.Steps[ApplyPlan]:
    """Reconciles the tenant's schedules by name with `specs` (each a mapping of create_schedule's
    keyword arguments, e.g. `{"name": "nightly", "cron": "0 3 * * *", "timezone": "UTC",
    "job_type": "report", "misfire_policy": "run_once", "jitter": "5m"}`): creates the missing,
    updates those that differ (only the keys a spec gives), and with `prune` deletes the tenant's
    schedules no spec names. With `dry_run`, changes nothing. Returns the ApplyPlan (`render()`:
    the text `cronwheel apply` prints). Applying the same specs twice changes nothing.

    Every spec is checked before anything changes (keys, types, values, and the timing fields by
    the server): a refusal raises SpecError (an InvalidArgument) naming the spec by index and
    name and the key, e.g. `specs[3].cron`. `tenant` None: the caller's tenant (refused when the
    token sees several). File format and semantics: docs/apply.md."""
    desired = check_specs(ctx, specs, tenant)  # nothing is sent before every spec passed
    return calls.Steps(_reconcile(ctx, desired, tenant, prune, dry_run))


Step = calls.Call[Any] | calls.Pages[Any]


def _reconcile(ctx: calls.Context, desired: list[_Desired], tenant: str | None, prune: bool,
               dry_run: bool) -> Generator[Step, Any, ApplyPlan]:
    current: list[t.Schedule] = yield calls.list_schedules(ctx, tenant=tenant, page_size=1000)
    tenants = sorted({s.tenant for s in current})
    if tenant is None and len(tenants) > 1:
        raise c.BadValue("tenant", f"these credentials see the schedules of several tenants ({', '.join(tenants)}): "
                                   "name the one to apply to")
    tenant = tenant or (tenants[0] if tenants else None)
    live = {s.name: s for s in current if tenant is None or s.tenant == tenant}
    plan: list[tuple[PlannedSchedule, _Desired | None]] = []
    for d in desired:
        cur = live.get(d.name)
        if cur is None:
            plan.append((PlannedSchedule(Action.CREATE, d.name, None, index=d.index), d))
            continue
        changes = [ch for k, v in d.values.items() if k != "name" for ch in diff(k, v, getattr(cur, k, v))]
        action = Action.UPDATE if changes else Action.UNCHANGED
        plan.append((PlannedSchedule(action, d.name, cur.id, tuple(changes), d.index, cur), d))
    if prune:
        named = {d.name for d in desired}
        plan += [(PlannedSchedule(Action.DELETE, s.name, s.id), None) for n, s in sorted(live.items())
                 if n not in named]
    for item, spec in plan:  # the server's timing checks, before anything changes
        if spec is not None and (item.action == Action.CREATE or any(ch.field.split(".")[0] in TIMING
                                                                     for ch in item.changes)):
            yield from _check_timing(ctx, spec, live.get(spec.name))
    if dry_run:
        return ApplyPlan(tenant, tuple(p for p, _ in plan), applied=False)
    done = []
    for item, spec in plan:
        done.append((yield from _carry_out(ctx, item, spec, live.get(item.name), tenant)))
    made = [i.schedule.tenant for i in done if i.schedule is not None]
    return ApplyPlan(tenant or (made[0] if made else None), tuple(done), applied=True)


def _check_timing(ctx: calls.Context, d: _Desired, cur: t.Schedule | None) -> Generator[Step, Any, None]:
    v = {k: d.values.get(k, getattr(cur, k, None)) for k in TIMING}
    dst = v["dst_policy"]
    if dst is not None and cur is not None:
        dst = _update_value(dst, cur.dst_policy)
    try:
        yield calls.preview(ctx, cron=v["cron"], timezone=v["timezone"], dst_policy=dst, jitter=v["jitter"],
                            seed_id=cur.id if cur else str(uuid.uuid4()), count=1)
    except InvalidArgument as exc:
        key = exc.field.removeprefix("spec.") if exc.field else ""
        key = key if key.split(".")[0] in TIMING else ""
        raise SpecError(d.index, d.name, key, str(exc).partition(": ")[2] or str(exc)) from None


def _carry_out(ctx: calls.Context, item: PlannedSchedule, d: _Desired | None, cur: t.Schedule | None,
               tenant: str | None) -> Generator[Step, Any, PlannedSchedule]:
    try:
        if item.action == Action.CREATE:
            assert d is not None
            made: t.Schedule = yield calls.create_schedule(ctx, **d.values, tenant=tenant)
            return dataclasses.replace(item, schedule_id=made.id, schedule=made)
        if item.action == Action.DELETE:
            assert cur is not None
            yield calls.delete(ctx, cur.id, expected_version=cur.version,
                               reason="cronwheel apply --prune: no spec names it")
            return dataclasses.replace(item, schedule=None)
        if item.action == Action.UNCHANGED:
            return item
        assert d is not None and cur is not None
        keys = {ch.field.split(".")[0] for ch in item.changes}
        fields = {k: _update_value(d.values[k], getattr(cur, k)) for k in keys if k != "paused"}
        now = cur
        if fields:
            now = yield calls.update_schedule(ctx, cur.id, expected_version=cur.version, **fields)
        if "paused" in keys:
            verb = calls.pause if d.values["paused"] else calls.resume
            now = yield verb(ctx, cur.id, reason="cronwheel apply", expected_version=now.version)
        return dataclasses.replace(item, schedule=now)
    except ApiError as exc:
        where = f"specs[{item.index}] ({item.name!r})" if item.index is not None else f"schedule {item.name!r}"
        raise type(exc)(exc.code, f"{where}: {item.action} refused: {exc}") from None
