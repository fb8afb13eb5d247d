"""Human-readable rendering of a session result (``kai simulate --output table``).

The JSON output (docs/interface.md) is the contract; this table is for people: it may
merge decisions (an eviction and the re-placement of the same pod read as one move),
draw the queue tree and show quantities in the units people read (cores, GiB).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kai.engine import IDLE_REASON, DecisionRecord, PodGroupResult, QueueResult, SessionResult

GIB = float(2**30)


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
        for line in evicted + reasons:
            lines.append(f"  - {line}")
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
