"""The ``triggers.toml`` config file: decoding and validation (``docs/config.md``).

Everything is checked before anything touches a database: TOML syntax, unknown keys, value types,
each trigger through ``Trigger.make`` (cron, timezone, policies), duplicate trigger ids, flow
references, Python flows importing to an async callable and command flows being argv lists. The
first problem raises :class:`ConfigError`, which names the file, the field path (and the line for
syntax errors) and an error code; the CLI prints it and exits with status 2.
"""

from __future__ import annotations

import datetime
import importlib
import inspect
import re
import shlex
import sys
import tomllib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import msgspec

from .._declarations import Trigger
from .._errors import TriggerError
from .._retry import RetryPolicy

if TYPE_CHECKING:
    import os

__all__ = [
    "DEFAULT_DB_NAME",
    "Config",
    "ConfigError",
    "FlowConfig",
    "LoadedConfig",
    "RunnerConfig",
    "SchedulerConfig",
    "TriggerConfig",
    "default_db_for",
    "explain_trigger_error",
    "load_config",
]

DEFAULT_DB_NAME = "trio-triggers.sqlite"
"""The database used when neither ``--db`` nor ``database`` is given: next to the config file."""

Overlap = Literal["skip", "buffer-one", "supersede"]
CatchUp = Literal["none", "one", "all"]


class ConfigError(Exception):
    """A config problem: ``file``, ``field`` (dotted path or ``None``), ``code``, ``message``.

    ``str(err)`` is ``"<file>: <field>: <code>: <message>"`` (the field part is left out when
    the problem is not tied to one; a syntax error names ``line <n>``), or
    ``"<file>:<line>: <field>: ..."`` when the key is on a line of the file. A trigger is named
    by its id, ``triggers[id="report"].cron`` (by its index when it has no usable id).
    """

    def __init__(
        self, file: str, field: str | None, code: str, message: str, *, line: int | None = None
    ) -> None:
        self.file = file
        self.field = field
        self.code = code
        self.message = message
        self.line = line
        """The line of the file the problem is on, when the file has one for it."""
        located = f"{file}:{line}" if line is not None else file
        where = f"{located}: {field}" if field else located
        super().__init__(f"{where}: {code}: {message}")


class RetryConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[flows.<id>.retry]``: a :class:`~trio_triggers.RetryPolicy` (seconds)."""

    max_attempts: int = 3
    initial_delay: float = 1.0
    max_delay: float = 60.0
    multiplier: float = 2.0
    retry_on: list[int | str] | None = None
    """Exit statuses and exception names worth another attempt (``"timeout"`` for a timeout);
    unset retries every failure."""


class FlowConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ``[flows.<id>]`` table: exactly one of ``python`` or ``command``."""

    python: str | None = None
    """``"package.module:function"``: an ``async def function(input, run)``."""
    command: list[str] | None = None
    """An argv list run with ``trio.run_process``; the input arrives as JSON on stdin."""
    timeout: float | None = None
    """Seconds one attempt may run before it is cancelled (a command's process group is
    ended) and fails."""
    retry: RetryConfig | None = None
    """How a failed attempt is retried (unset: a failure ends the run)."""
    env: dict[str, str] | None = None
    """Extra environment variables for a command."""
    cwd: str | None = None
    """Working directory of a command (relative to the config file's directory)."""


class TriggerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ``[[triggers]]`` entry (the fields of ``Trigger``, with ``flow`` for ``flow_id``)."""

    id: str
    flow: str
    cron: str
    timezone: str | None = None
    input: Any = msgspec.field(default_factory=dict)
    overlap: Overlap = "skip"
    catch_up: CatchUp = "none"
    max_catch_up: int = 0
    enabled: bool = True
    jitter: float = 0.0
    """Seconds: each launch waits a fixed pseudo-random part of it after its boundary."""
    start_at: Any = None
    """RFC 3339 with an offset (text or a TOML offset date-time): the window's first instant."""
    end_at: Any = None
    """RFC 3339 with an offset: the window's last instant (both ends are included)."""
    pause_after_failures: int | None = None
    """Pause the trigger when this many runs in a row fail."""


class RunnerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[runner]``: the embedded ``LocalRunner``."""

    concurrency: int = 4
    poll_interval: float = 1.0
    host_id: str | None = None
    lease_stale_after: float | None = None
    """Seconds after which a silent owner's lease counts as expired (default 30, the contract's
    ``HEARTBEAT_STALE_AFTER_MS``). Lower it only for tests on one host: every process sharing
    the database must use the same value."""


class SchedulerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[scheduler]``: ``SchedulerOptions`` (seconds) for ``trio-triggers run``."""

    poll_interval: float = 1.0
    run_poll_interval: float = 1.0
    concurrency: int = 4
    start_timeout: float = 240.0
    inspect_timeout: float = 30.0
    cancel_timeout: float = 30.0
    fire_retention_days: float = 30.0
    host: str = "local"


class Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The whole file."""

    database: str | None = None
    runner: RunnerConfig = msgspec.field(default_factory=RunnerConfig)
    scheduler: SchedulerConfig = msgspec.field(default_factory=SchedulerConfig)
    flows: dict[str, FlowConfig] = msgspec.field(default_factory=dict)
    triggers: list[TriggerConfig] = msgspec.field(default_factory=list)


class LoadedConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A validated config: the decoded file plus what validation produced."""

    path: Path
    config: Config
    triggers: list[Trigger]
    python_flows: dict[str, Callable[..., Any]]
    retry_policies: dict[str, RetryPolicy] = msgspec.field(default_factory=dict)
    """The flows' ``[flows.<id>.retry]`` tables, as policies (flows without one are absent)."""

    @property
    def directory(self) -> Path:
        return self.path.parent


_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]*)`$")


def _msgspec_path(raw: str) -> str:
    path = raw.lstrip(".")
    return path


def _join(base: str, name: str) -> str:
    return f"{base}.{name}" if base else name


_ENUMS: dict[str, tuple[str, ...]] = {"overlap": get_args(Overlap), "catch_up": get_args(CatchUp)}
_INDEXED = re.compile(r"^triggers\[(?P<index>\d+)\](?:\.(?P<key>\w+))?(?P<rest>.*)$")


class _Source:
    """The file's text and raw tables, to name a trigger by its id and find a key's line."""

    def __init__(self, text: str, data: dict[str, Any]) -> None:
        self.lines = text.splitlines()
        raw = data.get("triggers")
        self.triggers: list[Any] = raw if isinstance(raw, list) else []
        ids = Counter(t.get("id") if isinstance(t, dict) else None for t in self.triggers)
        self.unique = {i for i, n in ids.items() if isinstance(i, str) and n == 1}

    def trigger_base(self, index: int) -> str:
        entry = self.triggers[index] if index < len(self.triggers) else None
        trigger_id = entry.get("id") if isinstance(entry, dict) else None
        if isinstance(trigger_id, str) and trigger_id in self.unique:
            return f"triggers[id={msgspec.json.encode(trigger_id).decode()}]"
        return f"triggers[{index}]"

    def line(self, header: str, nth: int, key: str | None) -> int | None:
        """The 1-based line of ``key`` in the ``nth`` table headed ``header`` (its header line
        when ``key`` is ``None``); ``None`` when the file does not write it that way."""
        seen = -1
        inside = False
        key_line = re.compile(rf"^\s*{re.escape(key)}\s*=") if key else None
        for number, text in enumerate(self.lines, start=1):
            stripped = text.strip()
            if stripped.startswith("["):
                if inside:
                    return None
                if stripped.split("#", 1)[0].strip() == header:
                    seen += 1
                    if seen == nth:
                        if key_line is None:
                            return number
                        inside = True
                continue
            if inside and key_line is not None and key_line.match(text):
                return number
        return None

    def locate(self, path: str | None) -> tuple[str | None, int | None]:
        """A msgspec-style path (``triggers[1].cron``) named by id, with its line."""
        match = _INDEXED.match(path or "")
        if match is None:
            return path, None
        index, key = int(match.group("index")), match.group("key")
        field = self.trigger_base(index) + (f".{key}" if key else "") + match.group("rest")
        return field, self.line("[[triggers]]", index, key)


def explain_trigger_error(exc: TriggerError, cron: str, timezone: str | None) -> tuple[str, str]:
    """``(field, message)`` for a declaration error: which field (``cron``, ``timezone``, or
    the error's own path) and a message that says what was written and what is expected."""
    where = exc.path or "cron"
    message = exc.message
    if exc.path in (None, "timezone") and exc.code == "invalid_cron":
        if "time zone" in message:
            where = "timezone"
            message = (
                f"unknown time zone {timezone!r} (write an IANA name such as "
                "'Europe/Berlin', or a fixed offset such as '+05:30')"
            )
        elif exc.path is None and "number of segments" in message:
            count = len(cron.split())
            message = (
                f"{cron!r} has {count} field{'s' if count != 1 else ''}; 5 or 6 fields are "
                "expected (minute hour day-of-month month day-of-week, or second first and "
                "those five)"
            )
    return where, message


def _from_validation(
    file: str, exc: msgspec.ValidationError, prefix: str = "", source: _Source | None = None
) -> ConfigError:
    match = _AT.match(str(exc))
    assert match is not None
    message = match.group("msg")
    path = _msgspec_path(match.group("path") or "")
    if prefix:
        path = f"{prefix}.{path}" if path and not path.startswith("[") else prefix + path
    unknown = _UNKNOWN.match(message)
    missing = _MISSING.match(message)
    if unknown:
        path, code, message = _join(path, unknown.group("name")), "unknown_key", "unknown key"
        message += " in config"
    elif missing:
        path, code = _join(path, missing.group("name")), "missing_key"
        message = "required key is missing"
    else:
        code = "invalid_value"
        valid = _ENUMS.get(path.rsplit(".", 1)[-1])
        if valid is not None and message.startswith("Invalid enum value"):
            message += f"; valid values: {', '.join(valid)}"
    line = None
    if source is not None:
        located, line = source.locate(path)
        path = located or ""
    return ConfigError(file, path or None, code, message, line=line)


def default_db_for(config_path: Path) -> Path:
    return config_path.parent / DEFAULT_DB_NAME


def _positive(file: str, field: str, value: float) -> None:
    if not (value > 0 and value != float("inf")):
        raise ConfigError(file, field, "invalid_value", "must be a finite positive number")


def _import_flow(file: str, field: str, target: str, directory: Path) -> Callable[..., Any]:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            file, field, "invalid_flow", "python flows are written 'package.module:function'"
        )
    directory_text = str(directory)
    if directory_text not in sys.path:
        sys.path.insert(0, directory_text)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError(
            file,
            field,
            "flow_import",
            f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}",
        ) from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(
                file, field, "flow_import", f"module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not callable(obj):
        raise ConfigError(file, field, "invalid_flow", f"{target!r} is not callable")
    if not (inspect.iscoroutinefunction(obj) or inspect.iscoroutinefunction(obj.__call__)):
        raise ConfigError(
            file, field, "invalid_flow", f"{target!r} must be an async function (input, run)"
        )
    return obj  # type: ignore[no-any-return]


def _read(file: str, config_path: Path) -> tuple[Config, _Source]:
    """Parse the TOML file and decode it into a :class:`Config` (shapes and types only)."""
    try:
        raw = config_path.read_bytes()
    except OSError as exc:
        raise ConfigError(file, None, "unreadable", exc.strerror or str(exc)) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(file, None, "syntax", "the file is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        line_no = f"line {line.group(1)}" if line else None
        raise ConfigError(file, line_no, "syntax", str(exc)) from None
    # Flows are decoded one by one so an error names its flow (msgspec writes dict keys as
    # ``[...]`` in its paths).
    source = _Source(raw.decode("utf-8"), data)
    raw_flows = data.pop("flows", {})
    if not isinstance(raw_flows, dict):
        raise ConfigError(file, "flows", "invalid_value", "flows must be a table of flow tables")
    decoded_flows: dict[str, FlowConfig] = {}
    for name, value in raw_flows.items():
        command = value.get("command") if isinstance(value, dict) else None
        if isinstance(command, str):
            argv = msgspec.json.encode(_split(command)).decode().replace('","', '", "')
            raise ConfigError(
                file,
                f"flows.{name}.command",
                "invalid_flow",
                f"write the command as an argv list, e.g. command = {argv} (a string is "
                "neither split nor run by a shell)",
                line=source.line(f"[flows.{name}]", 0, "command"),
            )
        try:
            decoded_flows[name] = msgspec.convert(value, FlowConfig)
        except msgspec.ValidationError as exc:
            raise _from_validation(file, exc, f"flows.{name}") from None
    try:
        config = msgspec.convert(data, Config)
    except msgspec.ValidationError as exc:
        raise _from_validation(file, exc, source=source) from None
    config = msgspec.structs.replace(config, flows=decoded_flows)

    return config, source


def _split(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _check_settings(file: str, config: Config) -> None:
    """The ranges of the runner and scheduler settings, which the types alone do not say."""
    _positive(file, "runner.poll_interval", config.runner.poll_interval)
    if config.runner.concurrency < 1:
        raise ConfigError(file, "runner.concurrency", "invalid_value", "must be at least 1")
    if config.scheduler.concurrency < 1:
        raise ConfigError(file, "scheduler.concurrency", "invalid_value", "must be at least 1")
    for name in (
        "poll_interval",
        "run_poll_interval",
        "start_timeout",
        "inspect_timeout",
        "cancel_timeout",
        "fire_retention_days",
    ):
        _positive(file, f"scheduler.{name}", getattr(config.scheduler, name))
    stale = config.runner.lease_stale_after
    if stale is not None and not (2.0 <= stale < float("inf")):
        raise ConfigError(
            file, "runner.lease_stale_after", "invalid_value", "must be at least 2 seconds"
        )
    if config.runner.host_id is not None and not config.runner.host_id:
        raise ConfigError(file, "runner.host_id", "invalid_value", "must not be empty")


def _check_flows(
    file: str, config: Config, base_dir: Path, *, import_flows: bool
) -> dict[str, Callable[..., Any]]:
    """Check every flow and import the Python ones; the flows a trigger may name."""
    python_flows: dict[str, Callable[..., Any]] = {}
    for flow_id, flow in config.flows.items():
        field = f"flows.{flow_id}"
        if not flow_id or "\x00" in flow_id:
            raise ConfigError(file, field, "invalid_flow", "flow ids must be non-empty")
        if (flow.python is None) == (flow.command is None):
            raise ConfigError(
                file, field, "invalid_flow", "a flow needs exactly one of 'python' or 'command'"
            )
        if flow.timeout is not None:
            _positive(file, f"{field}.timeout", flow.timeout)
        if flow.command is not None:
            if not flow.command or not flow.command[0]:
                raise ConfigError(
                    file,
                    f"{field}.command",
                    "invalid_flow",
                    "command must be a non-empty list of strings (argv)",
                )
        else:
            for extra in ("env", "cwd"):
                if getattr(flow, extra) is not None:
                    raise ConfigError(
                        file, f"{field}.{extra}", "invalid_flow", "only command flows take this"
                    )
            assert flow.python is not None
            if import_flows:
                python_flows[flow_id] = _import_flow(file, f"{field}.python", flow.python, base_dir)
    return python_flows


def _retry_policies(file: str, config: Config) -> dict[str, RetryPolicy]:
    """Each ``[flows.<id>.retry]`` as a policy; a bad value names its key's path."""
    policies: dict[str, RetryPolicy] = {}
    for flow_id, flow in config.flows.items():
        retry = flow.retry
        if retry is None:
            continue
        try:
            policies[flow_id] = RetryPolicy(
                max_attempts=retry.max_attempts,
                initial_delay=retry.initial_delay,
                max_delay=retry.max_delay,
                multiplier=retry.multiplier,
                retry_on=None if retry.retry_on is None else tuple(retry.retry_on),
            )
        except TriggerError as exc:
            raise ConfigError(
                file, f"flows.{flow_id}.retry.{exc.path}", "invalid_value", exc.message
            ) from None
    return policies


def _triggers(file: str, config: Config, source: _Source) -> list[Trigger]:
    """Every trigger as a validated declaration; an error names its ``triggers[id="..."]``
    path (``triggers[i]`` when its id is not unique) and the line of the key."""
    triggers: list[Trigger] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(config.triggers):
        if entry.id in seen:
            raise ConfigError(
                file,
                f"{source.trigger_base(index)}.id",
                "duplicate_trigger",
                f"trigger id {entry.id!r} is already declared at triggers[{seen[entry.id]}]",
                line=source.line("[[triggers]]", index, "id"),
            )
        seen[entry.id] = index
        if entry.flow not in config.flows:
            raise ConfigError(
                file,
                f"{source.trigger_base(index)}.flow",
                "unknown_flow",
                f"no flow {entry.flow!r} is declared under [flows]",
                line=source.line("[[triggers]]", index, "flow"),
            )
        for name in ("start_at", "end_at"):
            # In a file an instant is a date-time (text or TOML's own), never epoch ms.
            value = getattr(entry, name)
            if value is not None and not isinstance(value, str | datetime.datetime):
                raise ConfigError(
                    file,
                    f"{source.trigger_base(index)}.{name}",
                    "invalid_value",
                    "expected an RFC 3339 date-time with an offset",
                    line=source.line("[[triggers]]", index, name),
                )
        try:
            trigger = Trigger.make(
                {
                    "id": entry.id,
                    "flow_id": entry.flow,
                    "input": entry.input,
                    "cron": entry.cron,
                    "timezone": entry.timezone,
                    "overlap": entry.overlap,
                    "catch_up": entry.catch_up,
                    "max_catch_up": entry.max_catch_up,
                    "enabled": entry.enabled,
                    "jitter": entry.jitter,
                    "start_at": entry.start_at,
                    "end_at": entry.end_at,
                    "pause_after_failures": entry.pause_after_failures,
                }
            )
        except TriggerError as exc:
            base = source.trigger_base(index)
            where: str | None = exc.path
            message = exc.message
            if where == "flow_id":
                where = "flow"
            if where in (None, "timezone") and exc.code in ("invalid_cron", "unsatisfiable_cron"):
                where, message = explain_trigger_error(exc, entry.cron, entry.timezone)
            raise ConfigError(
                file,
                f"{base}.{where}" if where else base,
                exc.code,
                message,
                line=source.line("[[triggers]]", index, where.split(".")[0] if where else None),
            ) from None
        triggers.append(trigger)
    return triggers


def load_config(path: str | os.PathLike[str], *, import_flows: bool = True) -> LoadedConfig:
    """Read and validate a config file; raise :class:`ConfigError` on the first problem."""
    config_path = Path(path)
    file = str(path)
    config, source = _read(file, config_path)
    _check_settings(file, config)
    python_flows = _check_flows(file, config, config_path.parent, import_flows=import_flows)
    retry_policies = _retry_policies(file, config)
    triggers = _triggers(file, config, source)
    return LoadedConfig(
        path=config_path,
        config=config,
        triggers=triggers,
        python_flows=python_flows,
        retry_policies=retry_policies,
    )
