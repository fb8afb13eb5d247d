"""Human-readable rendering of a session result (``kai simulate --output table``).

The JSON output (docs/interface.md) is the contract; this table is for people: it may
merge decisions (an eviction and the re-placement of the same pod read as one move),
draw the queue tree and show quantities in the units people read (cores, GiB).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from types import TracebackType
from typing import Any, TextIO

import orjson

from kai import _fast
from kai._dataclasses import dataclass
from kai.api.resources import INSUFFICIENT_RESOURCES, nodes_text
from kai.engine import IDLE_REASON, DecisionRecord, PodGroupResult, QueueResult, SessionResult

GIB = float(2**30)


# ------------------------------------------------------------------ JSON
def dumps_json(document: Any) -> str:
    """``json.dumps(document, indent=2)``: the JSON ``kai simulate`` prints."""
    return json_bytes(document).decode("ascii")


def json_bytes(document: Any) -> bytes:
    """``json.dumps(document, indent=2)`` as ASCII bytes, what ``kai simulate`` writes.

    orjson writes it when it gives the same text: every value is a
    plain JSON type, no float needs an exponent (repr and orjson write those
    differently), and no character needs an escape that only ``json`` makes.
    """
    compiled = _fast.module("collect")
    plain = _json_plain if compiled is None else compiled.json_plain
    if plain(document):
        try:
            data = orjson.dumps(document, option=orjson.OPT_INDENT_2)
        except TypeError:  # an integer beyond 64 bits, nesting too deep
            data = b"\x7f"
        if data.isascii() and b"\x7f" not in data:
            return data
    return json.dumps(document, indent=2).encode("ascii")


def _json_plain(value: Any) -> bool:
    """Whether orjson writes ``value`` as ``json`` does (see :func:`dumps_json`)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return value == 0.0 or 1e-4 <= abs(value) < 1e16
    if kind is dict:
        return all(type(k) is str and _json_plain(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(_json_plain(v) for v in value)
    return False


def _table(
    rows: Sequence[Sequence[str]],
    header: Sequence[str],
    *,
    right: Sequence[int] = (),
    groups: Sequence[tuple[str, int]] = (),
) -> str:
    """Columns padded to their widest cell; ``right``: indices of right-aligned columns.

    ``groups``: an optional line above the header, (title, columns spanned) from the left.
    """
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]

    def line(cells: Sequence[str]) -> str:
        out = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ]
        return "  ".join(out).rstrip()

    lines = []
    if groups:
        titles, col = [], 0
        for title, span in groups:
            width = sum(widths[col : col + span]) + 2 * (span - 1)
            titles.append(title.center(width) if title else " " * width)
            col += span
        lines.append("  ".join(titles).rstrip())
    lines.append(line(header))
    lines += [line(row) for row in rows]
    return "\n".join(lines)


def _num(value: float) -> str:
    """A quantity with at most two decimals and no trailing zeros (2, 0.5, 1376.25)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


# ------------------------------------------------------------------ decisions
@dataclass
class _Move:
    """An eviction whose pod was placed again in the same session."""

    evict: DecisionRecord
    placed: DecisionRecord


def _moves(decisions: Sequence[DecisionRecord]) -> dict[int, _Move]:
    """Moves by the index of their eviction; each re-placement is used once."""
    moves: dict[int, _Move] = {}
    evicted: dict[str, int] = {}  # pod -> index of its eviction not yet matched
    for i, d in enumerate(decisions):
        if d.type == "evict":
            evicted[d.pod] = i
        elif d.pod in evicted:
            j = evicted.pop(d.pod)
            moves[j] = _Move(decisions[j], d)
    return moves


def _gpu_groups(d: DecisionRecord) -> str:
    return ",".join(d.gpu_groups) if d.gpu_groups else ""


def _decisions_table(result: SessionResult, moves: dict[int, _Move]) -> str:
    placed_again = {id(m.placed) for m in moves.values()}
    with_groups = any(d.gpu_groups for d in result.decisions)
    rows = []
    for i, d in enumerate(result.decisions):
        if id(d) in placed_again:
            continue  # shown with its eviction, as a move
        move = moves.get(i)
        if move is not None:
            row = [d.action, "move", d.pod, f"{d.node or '-'} -> {move.placed.node or '-'}"]
            groups = _gpu_groups(move.placed)
        else:
            row = [d.action, d.type, d.pod, d.node or "-"]
            groups = _gpu_groups(d)
        if with_groups:
            row.append(groups or "-")
        row.append(d.reason or "")
        rows.append(row)
    if not rows:
        return "(none)"
    header = ["ACTION", "TYPE", "POD", "NODE"] + (["GPU GROUP"] if with_groups else []) + ["REASON"]
    return _table(rows, header)


def _pods_table(result: SessionResult) -> str:
    # The device of a shared-GPU pod placed this session (the last placement wins).
    devices = {d.pod: _gpu_groups(d) for d in result.decisions if d.type != "evict"}
    with_groups = any(devices.values())
    rows = []
    for key, p in result.pods.items():
        row = [key, p.status, p.node or "-"]
        if with_groups:
            row.append(devices.get(key) or "-")
        rows.append(row)
    return _table(rows, ["POD", "STATUS", "NODE"] + (["GPU GROUP"] if with_groups else []))


# ------------------------------------------------------------------ pod groups
_FOR_GROUP = re.compile(r"^\w+ (for pod group \S+) by (\S+)$")


def _eviction_lines(
    g: PodGroupResult, moves: dict[int, _Move], *, detail: bool = True
) -> list[str]:
    """What happened to a group's pods evicted this session, one line per cause.

    ``detail``: name each pod and its node(s); otherwise count them.
    """
    moved_by_evict = {id(m.evict): m for m in moves.values()}
    by_cause: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for d in g.evictions:
        moved, evicted = by_cause.setdefault((d.action, d.reason or ""), ([], []))
        name = d.pod.split("/", 1)[-1]
        move = moved_by_evict.get(id(d))
        if move is not None:
            moved.append(f"{name} {d.node or '-'} -> {move.placed.node or '-'}")
        else:
            evicted.append(f"{name} on {d.node or '-'}")
    lines = []
    for (action, reason), (moved, evicted) in by_cause.items():
        # "reclaimed for pod group x by reclaim" says the action twice: keep the group.
        match = _FOR_GROUP.match(reason)
        cause = match.group(1) if match and match.group(2) == action else reason
        cause = f" {cause}" if cause.startswith("for ") else f" ({cause})" if cause else ""
        for verb, pods in (("moved", moved), ("evicted", evicted)):
            if not pods:
                continue
            if detail:
                lines.append(f"{verb} by {action}{cause}: {', '.join(pods)}")
            else:
                count = f"{len(pods)} pod" + ("s" if len(pods) > 1 else "")
                lines.append(f"{verb} by {action}{cause} ({count})")
    return lines


def _elastic_note(g: PodGroupResult) -> str | None:
    if not g.scheduled or not g.extra_pods_waiting:
        return None
    return f"elastic: {g.extra_pods_waiting} of {g.extra_pods} extra pods wait for resources"


def _group_reason(g: PodGroupResult, moves: dict[int, _Move]) -> str:
    parts = _eviction_lines(g, moves, detail=False)
    note = _elastic_note(g)
    if note:
        parts.append(note)
    elif g.reason and not (parts and g.reason == IDLE_REASON):
        parts.append(g.reason)
    return "; ".join(parts)


def _groups_table(result: SessionResult, moves: dict[int, _Move]) -> str:
    rows = [
        [
            k,
            g.queue or "-",
            "yes" if g.scheduled else "no",
            "yes" if g.preemptible else "no",
            _group_reason(g, moves),
        ]
        for k, g in result.pod_groups.items()
    ]
    return _table(rows, ["POD GROUP", "QUEUE", "SCHEDULED", "PREEMPTIBLE", "REASON"])


_NODES_AVAILABLE = re.compile(r"^(.*\b0/\d+ nodes are available):? ?(.*)$")
_SHORT_OF = re.compile(r"^(\S+) on (\d+ nodes?): (.*)$")


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside parentheses."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i = i + len(sep)
            continue
        i += 1
    parts.append(text[start:])
    return parts


def _node_failures(reason: str) -> list[str]:
    """One line per cause of a fit error's ``0/N nodes are available: ...``, with its nodes.

    ``8 insufficient resources (nvidia.com/gpu on 8 nodes: needs 4, at most 2 free)``
    reads ``8 nodes: insufficient nvidia.com/gpu (needs 4, at most 2 free)``.
    """
    lines = []
    for part in _split_top(reason, ", "):
        count, _, cause = part.partition(" ")
        if not count.isdigit():
            return []  # not a list of node counts: leave the reason as it is
        nodes = nodes_text(int(count))
        detail = cause.removeprefix(INSUFFICIENT_RESOURCES)
        if cause != detail and detail.startswith(" (") and detail.endswith(")"):
            for short in _split_top(detail[2:-1], "; "):
                match = _SHORT_OF.match(short)
                if match is None:
                    return []
                name, on, needs = match.groups()
                lines.append(f"{on}: insufficient {name} ({needs})")
        else:
            lines.append(f"{nodes}: {cause.removeprefix('node(s) ')}")
    return lines


def _explain_lines(reason: str) -> list[str]:
    """A reason as bullet lines: the nodes' causes of a fit error each on its own line."""
    match = _NODES_AVAILABLE.match(reason)
    if match is not None and match.group(2):
        causes = _node_failures(match.group(2))
        if causes:
            return [f"  - {match.group(1)}:"] + [f"      {line}" for line in causes]
    return [f"  - {reason}"]


def _why_pending(result: SessionResult, moves: dict[int, _Move]) -> str:
    lines = []
    for key, g in result.pod_groups.items():
        note = _elastic_note(g)
        if g.scheduled and not note and not g.evictions:
            continue
        evicted = _eviction_lines(g, moves)
        reasons = list(g.explain) or ([g.reason] if g.reason else [])
        if evicted:
            # A group emptied by the evictions has nothing to schedule: say what happened.
            reasons = [r for r in reasons if r != IDLE_REASON]
        elif not reasons and not note:
            reasons = ["no reason recorded"]
        lines.append(f"{key}:" if note is None else f"{key} ({note}):")
        for line in evicted:
            lines.append(f"  - {line}")
        for reason in reasons:
            lines.extend(_explain_lines(reason))
        for w in g.warnings:
            lines.append(f"  ! {w}")
    return "\n".join(lines) if lines else "(every group scheduled)"


# ------------------------------------------------------------------ queues
def _queue_order(queues: dict[str, QueueResult]) -> list[tuple[str, str]]:
    """(tree prefix, name) of every queue, parents before their children, by name."""
    children: dict[str | None, list[str]] = {}
    for name, q in queues.items():
        parent = q.parent if q.parent in queues else None
        children.setdefault(parent, []).append(name)
    out: list[tuple[str, str]] = []

    def walk(parent: str | None, indent: str) -> None:
        kids = sorted(children.get(parent, ()))
        for i, name in enumerate(kids):
            last = i == len(kids) - 1
            branch = "" if parent is None else ("└─ " if last else "├─ ")
            out.append((indent + branch, name))
            walk(name, "" if parent is None else indent + ("   " if last else "│  "))

    walk(None, "")
    return out


def _queues_table(result: SessionResult) -> str:
    rows = []
    for prefix, name in _queue_order(result.queues):
        q = result.queues[name]
        row = [prefix + name]
        for resource, scale in (("gpu", 1.0), ("cpu", 1000.0), ("memory", GIB)):
            for values in (q.allocated, q.fair_share, q.requested):
                row.append(_num(values.get(resource, 0) / scale))
        rows.append(row)
    header = ["QUEUE"] + ["ALLOC", "FAIR", "REQ"] * 3
    groups = [("", 1), ("GPU", 3), ("CPU (cores)", 3), ("MEMORY (GiB)", 3)]
    return _table(rows, header, right=range(1, 10), groups=groups)


# ------------------------------------------------------------------ the table
def render_table(result: SessionResult, *, explain: bool = False) -> str:
    moves = _moves(result.decisions)
    parts = [
        "DECISIONS\n" + _decisions_table(result, moves),
        "PODS\n" + _pods_table(result),
        "POD GROUPS\n" + _groups_table(result, moves),
        "QUEUES\n" + _queues_table(result),
    ]
    if explain:
        parts.append("WHY PENDING\n" + _why_pending(result, moves))
    return "\n\n".join(parts)


# ------------------------------------------------------------------ progress
class Bar:
    """One line of a progress display: a task of ``total`` steps (None: not counted)."""

    def __init__(self, progress: Any = None, task: Any = None, description: str = "") -> None:
        self._progress = progress  # rich.progress.Progress, None when nothing is shown
        self._task = task
        self._description = description
        self._started = False

    def phase(self, name: str) -> None:
        """Start the next step, named ``name``: the one before it is done."""
        if self._progress is None:
            return
        self._progress.update(
            self._task,
            advance=1 if self._started else 0,
            description=f"{self._description}: {name}",
        )
        self._started = True

    def advance(self, steps: int = 1) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=steps)

    def finish(self) -> None:
        """Done: the line goes away (what is printed afterwards says the rest)."""
        if self._progress is not None:
            self._progress.remove_task(self._task)
            self._progress = None


class Progress:
    """Progress of long work on stderr, as rich draws it on a terminal.

    Nothing is drawn when the stream is not a terminal (CI logs, pipes, files) or when
    rich is not installed: the work runs the same, silently.  The display starts with
    the first bar and is erased on exit, so that it never mixes with what the command
    prints to stdout afterwards.
    """

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None) -> None:
        self._stream = sys.stderr if stream is None else stream
        if enabled is None:
            enabled = _is_terminal(self._stream)
        self._enabled = enabled
        self._live: Any = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        self._enabled = False

    def bar(self, description: str, total: int | None = None) -> Bar:
        live = self._start()
        if live is None:
            return Bar()
        task = live.add_task(description, total=total)
        return Bar(live, task, description)

    def _start(self) -> Any:
        if self._live is None and self._enabled:
            self._live = _rich_progress(self._stream)
            if self._live is None:
                self._enabled = False  # rich is not installed: no display
            else:
                self._live.start()
        return self._live


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def _rich_progress(stream: TextIO) -> Any:
    try:
        from rich import progress as rp
        from rich.console import Console
    except ImportError:
        return None
    return rp.Progress(
        rp.SpinnerColumn(),
        rp.TextColumn("{task.description}"),
        rp.BarColumn(),
        rp.MofNCompleteColumn(),
        rp.TimeElapsedColumn(),
        console=Console(file=stream, force_terminal=True),
        transient=True,
        # What the command prints goes to stdout after the display is gone; routing it
        # through rich meanwhile would slow a large JSON document down.
        redirect_stdout=False,
        redirect_stderr=False,
    )


# What makes a ``kai simulate`` large enough to show its phases: the pods it schedules,
# or before they are read, the size of its input (10,000 pods take 4 MiB of YAML at the
# least, and several seconds to parse).
LARGE_SIMULATION_PODS = 10_000
LARGE_SIMULATION_BYTES = 4 << 20

SIMULATE_PHASES = ("loading", "scheduling", "output")


class SimulateProgress:
    """The phases of ``kai simulate``, shown for large inputs only (see :class:`Progress`).

    ``phase`` starts the next of :data:`SIMULATE_PHASES`; ``loaded`` reports the pods
    read, which may turn the display on for what is left.
    """

    def __init__(self, paths: Sequence[str], progress: Progress | None = None) -> None:
        self._progress = Progress() if progress is None else progress
        self._bar: Bar | None = None
        self._done: list[str] = []
        if _input_bytes(paths) >= LARGE_SIMULATION_BYTES:
            self._show()

    def __enter__(self) -> SimulateProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.close()

    def _show(self) -> None:
        self._bar = self._progress.bar("kai simulate", total=len(SIMULATE_PHASES))
        for name in self._done:  # phases run before the display: done
            self._bar.phase(name)

    def phase(self, name: str) -> None:
        self._done.append(name)
        if self._bar is not None:
            self._bar.phase(name)

    def loaded(self, pods: int) -> None:
        if self._bar is None and pods >= LARGE_SIMULATION_PODS:
            self._show()


def _input_bytes(paths: Sequence[str]) -> int:
    total = 0
    for path in paths:
        try:
            total += os.path.getsize(path)
        except OSError:  # reported by the loader, with the file's name
            pass
    return total
