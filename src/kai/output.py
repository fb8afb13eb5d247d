"""Human-readable rendering of a session result."""

from __future__ import annotations

from kai.engine import SessionResult


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _num(value: float) -> str:
    return f"{value:g}"


def render_table(result: SessionResult, *, explain: bool = False) -> str:
    parts = []
    decisions = [[d.action, d.type, d.pod, d.node or "-", d.reason or ""] for d in result.decisions]
    parts.append(
        "DECISIONS\n"
        + (
            _table(decisions, ["ACTION", "TYPE", "POD", "NODE", "REASON"])
            if decisions
            else "(none)"
        )
    )
    pods = [[k, p.status, p.node or "-"] for k, p in result.pods.items()]
    parts.append("PODS\n" + _table(pods, ["POD", "STATUS", "NODE"]))
    groups = [
        [
            k,
            g.queue or "-",
            "yes" if g.scheduled else "no",
            "yes" if g.preemptible else "no",
            g.reason or "",
        ]
        for k, g in result.pod_groups.items()
    ]
    parts.append(
        "POD GROUPS\n"
        + _table(groups, ["POD GROUP", "QUEUE", "SCHEDULED", "PREEMPTIBLE", "REASON"])
    )
    queues = []
    for name, q in result.queues.items():
        queues.append(
            [
                name,
                _num(q.fair_share.get("gpu", 0)),
                _num(q.allocated.get("gpu", 0)),
                _num(q.requested.get("gpu", 0)),
                _num(q.fair_share.get("cpu", 0)),
                _num(q.allocated.get("cpu", 0)),
            ]
        )
    parts.append(
        "QUEUES\n"
        + _table(
            queues, ["QUEUE", "GPU FAIR", "GPU ALLOC", "GPU REQ", "CPU FAIR (m)", "CPU ALLOC (m)"]
        )
    )
    if explain:
        lines = []
        for key, g in result.pod_groups.items():
            if g.scheduled:
                continue
            lines.append(f"{key}:")
            for line in g.explain or [g.reason or "no reason recorded"]:
                lines.append(f"  - {line}")
            for w in g.warnings:
                lines.append(f"  ! {w}")
        parts.append("WHY PENDING\n" + ("\n".join(lines) if lines else "(every group scheduled)"))
    return "\n\n".join(parts)
