"""Read declaration YAML into validated :mod:`engine.contract` dataclasses.

Every error is a ``DeclarationError`` whose message starts with the YAML path of the field
(``regions.estimator_att.retention.order``), shows the bad value and names the fix. Unknown keys
are errors, so a typo never passes silently. Files are read within :mod:`engine.safe_yaml`'s
bounds (safe tags only, size, depth and alias bounds); expressions are parsed by
:mod:`engine.expr`, never evaluated by Python. A file's text is validated once a process:
:func:`load_declaration` returns the same :class:`Declaration` while the text is the same.

Shipped declarations live in ``assets/declarations/`` at the repository root (the same folder in
an editable install); an installed distribution that packages ``assets`` as a package is found
through ``importlib.resources``.
"""

from __future__ import annotations

import functools
import importlib.resources
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.contract import (
    CALL_PARAMETERS,
    DTYPE_BYTES,
    HOST_RANDOMNESS_FORBIDDEN,
    SDPA_KERNELS,
    STEADY_KIND,
    CallExtent,
    Clock,
    Constant,
    Declaration,
    DeclarationError,
    DeclarationNotFound,
    DeclaredCall,
    Dim,
    Envelope,
    Operator,
    Order,
    Region,
    Retention,
    RetentionPolicy,
    StreamEvent,
    frozen,
    resolve_operating_point,
)
from engine.expr import Expr, ExprError, Predicate, parse_predicate, predicate_names
from engine.extents import MAX_CLOSURE_CALLS
from engine.safe_yaml import YamlError, parse_yaml, read_yaml_text
from engine.yaml_fields import Fields, choice, entries, expr_errors, expr_field, typed

REQUIRED: Any = object()
_RETENTION_KEYS = {
    RetentionPolicy.SLIDING_WINDOW: ("window",),
    RetentionPolicy.RING: ("capacity",),
    RetentionPolicy.PROMPT_PLUS_HISTORY: ("order", "prompt", "history"),
}


def declarations_dir() -> Path:
    """The folder of shipped declarations (repository checkout first, then an installed package)."""
    repo = Path(__file__).resolve().parents[1] / "assets" / "declarations"
    if repo.is_dir() or importlib.util.find_spec("assets") is None:
        return repo
    return Path(str(importlib.resources.files("assets") / "declarations"))


MAX_RATE_HZ = 1e7  # a clock faster than 10 MHz is no speech clock
MAX_CATALOG_LIMIT = 4096  # catalogs are enumerated up to this width; plans count past it


def list_declarations() -> list[str]:
    """Names of the shipped declarations, sorted (each loads with :func:`load_declaration`)."""
    return sorted(path.stem for path in declarations_dir().glob("*.yaml"))


def resolve_path(path_or_name: str | Path) -> Path:
    """A bare name resolves under :func:`declarations_dir`; anything else is a path."""
    text = str(path_or_name)
    if "/" not in text and "\\" not in text and not text.endswith((".yaml", ".yml")):
        path = declarations_dir() / f"{text}.yaml"
    else:
        path = Path(path_or_name)
    if not path.is_file():
        shipped = ", ".join(list_declarations()) or "none"
        raise DeclarationNotFound(
            f"no declaration at {path}: pass a YAML path or one of the shipped names ({shipped})"
        )
    return path


def load_declaration(path_or_name: str | Path) -> Declaration:
    """Load and validate a declaration from a YAML path or a bare name under the shipped
    ``assets/declarations/`` (``"minicpmo45_token2wav"``). Raises ``DeclarationError``."""
    path = resolve_path(path_or_name)
    try:
        text = read_yaml_text(path)
    except YamlError as error:
        raise DeclarationError(f"{error}; fix the declaration file") from None
    return _declaration(text, path)


@functools.lru_cache(maxsize=16)
def _declaration(text: str, path: Path) -> Declaration:
    """The declaration ``text`` (read from ``path``) states, validated once per text and path:
    a family's checks, footprint, binding and the command line's help read one declaration
    several times a run, and its plans (:func:`engine.plan.make_plan`) are kept with it. A file
    that changes is another text, read again."""
    try:
        document = parse_yaml(text, str(path))
    except YamlError as error:
        raise DeclarationError(f"{error}; fix the declaration file") from None
    return parse_declaration(document, default_name=path.stem)


def parse_declaration(document: object, default_name: str = "") -> Declaration:
    """Validate a ``yaml.safe_load``-ed document and build the :class:`Declaration`."""
    top = Fields(document, "")
    name = typed(top.take("name", default_name), str, "name", "a string")
    family = typed(top.take("family", ""), str, "family", "a string")
    description = typed(top.take("description", ""), str, "description", "a string")
    point = _operating_point(top.take("operating_point"))
    names = frozenset(point)
    clocks = _clocks(top.take("clocks"), names)
    calls = _call_kinds(top.take("calls"), names)
    variables = frozenset().union(
        *(kind.fixed.keys() | kind.ranges.keys() for kind in calls.values())
    )
    admission = _admission(top.take("admission"), names | variables | set(CALL_PARAMETERS))
    host = Fields(top.take("effects"), "effects")
    host_randomness = choice(
        host.take("host_randomness"), "effects.host_randomness", [HOST_RANDOMNESS_FORBIDDEN]
    )
    host.close()
    regions = {
        key: _region(key, value, names, clocks)
        for key, value in entries(top.take("regions"), "regions").items()
    }
    constants = {
        key: _constant(key, value, names)
        for key, value in entries(top.take("constants", {}), "constants").items()
    }
    operators = _operators(top.take("operators"), names, regions, calls)
    stream = _stream(top.take("stream", []), calls, resolve_operating_point(point, {}))
    top.close()
    return Declaration(
        name=name,
        family=family,
        description=description,
        clocks=frozen(clocks),
        operating_point=frozen(point),
        admission=admission,
        regions=frozen(regions),
        constants=frozen(constants),
        calls=frozen(calls),
        operators=frozen(operators),
        stream=tuple(stream),
        host_randomness=host_randomness,
    )


def _operating_point(value: object) -> dict[str, Expr]:
    items = entries(value, "operating_point")
    names = frozenset(items)
    point = {key: expr_field(item, f"operating_point.{key}", names) for key, item in items.items()}
    resolve_operating_point(point, {})  # cycles and division by zero fail here, at load
    return point


def _clocks(value: object, names: frozenset[str]) -> dict[str, Clock]:
    items = entries(value, "clocks")
    clocks: dict[str, Clock] = {}
    for key, item in items.items():
        fields, path = Fields(item, f"clocks.{key}"), f"clocks.{key}"
        rate, per = fields.take("rate_hz", None), fields.take("per", None)
        ratio, event = fields.take("ratio", None), fields.take("event", False)
        fields.close()
        forms = [rate is not None, per is not None, bool(event)]
        if sum(forms) != 1 or (per is None) != (ratio is None):
            raise DeclarationError(
                f"{path}: give exactly one of rate_hz, per + ratio, or event: true"
            )
        if per is not None:
            choice(per, f"{path}.per", [*items, "call"])
        if rate is not None and (
            isinstance(rate, bool)
            or not isinstance(rate, int | float)
            or not 0 < rate <= MAX_RATE_HZ  # also refuses NaN
        ):
            raise DeclarationError(
                f"{path}.rate_hz: got {rate!r}; expected a number in (0, {MAX_RATE_HZ}]"
            )
        clocks[key] = Clock(
            name=key,
            rate_hz=None if rate is None else float(rate),
            per=per,
            ratio=None if ratio is None else expr_field(ratio, f"{path}.ratio", names),
            event=bool(event),
        )
    for key in clocks:
        chain = [key]
        while (per := clocks[chain[-1]].per) in clocks:
            if per in chain:
                raise DeclarationError(
                    f"clocks.{key}.per: {' -> '.join([*chain, per])} is a cycle; end the chain at "
                    "a clock with rate_hz or event: true"
                )
            chain.append(per)
    return clocks


def _call_kinds(value: object, names: frozenset[str]) -> dict[str, DeclaredCall]:
    kinds: dict[str, DeclaredCall] = {}
    for key, item in entries(value, "calls").items():
        path = f"calls.{key}"
        variables = entries(item or {}, path)
        fixed: dict[str, Expr] = {}
        ranges: dict[str, tuple[Expr, Expr]] = {}
        for var, spec in variables.items():
            if var in names or var in CALL_PARAMETERS:
                raise DeclarationError(f"{path}.{var}: shadows a reserved or operating-point name")
            if isinstance(spec, list):
                if len(spec) != 2:
                    raise DeclarationError(f"{path}.{var}: got {spec!r}; expected [low, high]")
                low, high = (expr_field(bound, f"{path}.{var}", names) for bound in spec)
                ranges[var] = (low, high)
            else:
                fixed[var] = expr_field(spec, f"{path}.{var}", names)
        kinds[key] = DeclaredCall(name=key, fixed=frozen(fixed), ranges=frozen(ranges))
    return kinds


def _admission(value: object, names: frozenset[str]) -> Predicate:
    with expr_errors("admission"):
        predicate = parse_predicate(value)
    unknown = sorted(predicate_names(predicate) - names)
    if unknown:
        raise DeclarationError(
            f"admission: unknown name {unknown[0]!r}; expected one of {', '.join(sorted(names))}"
        )
    return predicate


def _region(key: str, value: object, names: frozenset[str], clocks: Mapping[str, Clock]) -> Region:
    path = f"regions.{key}"
    fields = Fields(value, path)
    dims = tuple(
        _dim(d, v, f"{path}.dims.{d}", names, clocks)
        for d, v in entries(fields.take("dims"), f"{path}.dims").items()
    )
    if sum(dim.clock is not None for dim in dims) != 1:
        raise DeclarationError(
            f"{path}.dims: exactly one dim must follow a clock ({{clock: name}})"
        )
    region = Region(
        name=key,
        dims=dims,
        retention=_retention(fields.take("retention"), f"{path}.retention", names),
        reset=expr_field(fields.take("reset"), f"{path}.reset", names),
        address_stable=typed(
            fields.take("address_stable"), bool, f"{path}.address_stable", "true or false"
        ),
        dtype=choice(fields.take("dtype"), f"{path}.dtype", list(DTYPE_BYTES)),
        envelope=_envelope(fields.take("envelope", None), f"{path}.envelope", len(dims)),
        note=typed(fields.take("note", ""), str, f"{path}.note", "a string"),
    )
    fields.close()
    return region


def _dim(
    key: str, value: object, path: str, names: frozenset[str], clocks: Mapping[str, Clock]
) -> Dim:
    if not isinstance(value, Mapping):
        return Dim(name=key, size=expr_field(value, path, names))
    fields = Fields(value, path)
    clock = choice(fields.take("clock"), f"{path}.clock", list(clocks))
    fields.close()
    return Dim(name=key, clock=clock)


def _retention(value: object, path: str, names: frozenset[str]) -> Retention:
    fields = Fields(value, path)
    policy = RetentionPolicy(
        choice(fields.take("policy"), f"{path}.policy", [p.value for p in RetentionPolicy])
    )
    parsed: dict[str, Any] = {}
    for key in _RETENTION_KEYS[policy]:
        raw = fields.take(key)
        if key == "order":
            parsed[key] = Order(choice(raw, f"{path}.order", [o.value for o in Order]))
        else:
            parsed[key] = expr_field(raw, f"{path}.{key}", names)
    fields.close()
    return Retention(policy=policy, **parsed)


def _envelope(value: object, path: str, rank: int) -> Envelope | None:
    if value is None:
        return None
    fields = Fields(value, path)
    shape = fields.take("shape")
    if not isinstance(shape, list) or len(shape) != rank:
        raise DeclarationError(
            f"{path}.shape: got {shape!r}; expected {rank} integers, one per dim"
        )
    envelope = Envelope(
        shape=tuple(_positive(size, f"{path}.shape") for size in shape),
        dtype=choice(fields.take("dtype"), f"{path}.dtype", list(DTYPE_BYTES)),
        source=typed(fields.take("source", ""), str, f"{path}.source", "a string"),
    )
    fields.close()
    return envelope


def _constant(key: str, value: object, names: frozenset[str]) -> Constant:
    path = f"constants.{key}"
    fields = Fields(value, path)
    shape = fields.take("shape")
    if not isinstance(shape, list):
        raise DeclarationError(f"{path}.shape: got {shape!r}; expected a list of sizes")
    constant = Constant(
        name=key,
        shape=tuple(expr_field(size, f"{path}.shape", names) for size in shape),
        dtype=choice(fields.take("dtype"), f"{path}.dtype", list(DTYPE_BYTES)),
        note=typed(fields.take("note", ""), str, f"{path}.note", "a string"),
    )
    fields.close()
    return constant


def _names_list(value: object, path: str, options: Mapping[str, object]) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise DeclarationError(f"{path}: got {value!r}; expected a list of region names")
    return tuple(choice(item, path, list(options)) for item in value)


def _operators(
    value: object,
    names: frozenset[str],
    regions: Mapping[str, Region],
    kinds: Mapping[str, DeclaredCall],
) -> dict[str, Operator]:
    """Operators, each region written by at most one; the grid kind takes no ranged variable."""
    operators: dict[str, Operator] = {}
    writers: dict[str, str] = {}
    for key, item in entries(value, "operators").items():
        path = f"operators.{key}"
        fields = Fields(item, path)
        calls = {
            kind: _call_extent(spec, f"{path}.calls.{kind}", names, kinds[kind])
            for kind, spec in _checked_kinds(fields.take("calls"), f"{path}.calls", kinds).items()
        }
        operator = Operator(
            name=key,
            reads=_names_list(fields.take("reads"), f"{path}.reads", regions),
            writes=_names_list(fields.take("writes", []), f"{path}.writes", regions),
            calls=frozen(calls),
            grid=choice(fields.take("grid", STEADY_KIND), f"{path}.grid", list(calls)),
            device_randomness=typed(
                fields.take("device_randomness", False),
                bool,
                f"{path}.device_randomness",
                "true or false",
            ),
            catalog_limit=_bounded(
                fields.take("catalog_limit", 64), f"{path}.catalog_limit", MAX_CATALOG_LIMIT
            ),
            note=typed(fields.take("note", ""), str, f"{path}.note", "a string"),
            kernels=frozen(_kernels(fields.take("kernels", {}), f"{path}.kernels")),
        )
        fields.close()
        if kinds[operator.grid].ranges:
            raise DeclarationError(
                f"{path}.grid: call kind {operator.grid!r} has ranged variables; the grid kind "
                "needs fixed ones (a constant stride)"
            )
        for region in operator.writes:
            if region in writers:
                raise DeclarationError(
                    f"{path}.writes: region {region!r} is already written by {writers[region]!r}; "
                    "each region has one writer, so its extent is well defined"
                )
            writers[region] = key
        operators[key] = operator
    return operators


def _kernels(value: object, path: str) -> dict[str, str]:
    """An operator's pinned kernels: ``{sdpa: <backend>}`` (the only choice so far)."""
    fields = Fields(value, path)
    kernels = {}
    sdpa = fields.take("sdpa", None)
    if sdpa is not None:
        kernels["sdpa"] = choice(sdpa, f"{path}.sdpa", list(SDPA_KERNELS))
    fields.close()
    return kernels


def _checked_kinds(value: object, path: str, kinds: Mapping[str, DeclaredCall]) -> dict[str, Any]:
    items = entries(value, path)
    for kind in items:
        choice(kind, f"{path}.{kind}", list(kinds))
    return items


def _call_extent(value: object, path: str, names: frozenset[str], kind: DeclaredCall) -> CallExtent:
    fields = Fields(value, path)
    scope = names | kind.fixed.keys() | kind.ranges.keys()
    extent = CallExtent(
        frames=expr_field(fields.take("frames"), f"{path}.frames", scope),
        advance=expr_field(fields.take("advance"), f"{path}.advance", scope),
    )
    fields.close()
    return extent


def _stream(
    value: object, kinds: Mapping[str, DeclaredCall], point: Mapping[str, int]
) -> list[StreamEvent]:
    """The declared call pattern; variable values are checked against the default point."""
    if not isinstance(value, list):
        raise DeclarationError(f"stream: got {value!r}; expected a list of events")
    return [_event(item, f"stream[{index}]", kinds, point) for index, item in enumerate(value)]


def _event(
    value: object, path: str, kinds: Mapping[str, DeclaredCall], point: Mapping[str, int]
) -> StreamEvent:
    if value == "reset":
        return StreamEvent(kind=None)
    fields = Fields(value, path)
    kind = kinds[choice(fields.take("call"), f"{path}.call", list(kinds))]
    repeat = _bounded(fields.take("repeat", 1), f"{path}.repeat", MAX_CLOSURE_CALLS)
    try:
        bounds = {var: kind.bounds(var, point) for var in kind.ranges}
    except ExprError as error:
        raise DeclarationError(f"{path}: calls.{kind.name}: {error}") from None
    values = {var: _ranged(fields.take(var), f"{path}.{var}", bounds[var]) for var in kind.ranges}
    fields.close()
    return StreamEvent(kind=kind.name, values=frozen(values), repeat=repeat)


def _positive(value: object, path: str) -> int:
    number: int = typed(value, int, path, "a positive integer")
    if number < 1:
        raise DeclarationError(f"{path}: got {number}; expected a positive integer")
    return number


def _bounded(value: object, path: str, bound: int) -> int:
    number = _positive(value, path)
    if number > bound:
        raise DeclarationError(f"{path}: got {number}; expected a positive integer <= {bound}")
    return number


def _ranged(value: object, path: str, bounds: tuple[int, int]) -> int:
    number: int = typed(value, int, path, f"an integer in [{bounds[0]}, {bounds[1]}]")
    if not bounds[0] <= number <= bounds[1]:
        raise DeclarationError(
            f"{path}: got {number}; expected an integer in [{bounds[0]}, {bounds[1]}]"
        )
    return number
