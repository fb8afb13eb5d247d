"""Time-based fair share, side by side: kValue 0 against kValue 1.

A 16-GPU cluster, two queues with no deserved quota and over-quota weight 1, each with
a day of one-hour 16-GPU single-pod jobs waiting.  With kValue 0 (historical usage
ignored) whichever queue got the cluster first keeps it while its backlog lasts; with
kValue 1 the queue that used the cluster recently gets a smaller fair share, and the
two alternate.

    python examples/replay/fairshare.py [OUT_DIR]     # default: replay-fairshare/

Writes each run's kai replay outputs to OUT_DIR/kvalue-0 and OUT_DIR/kvalue-1, and
OUT_DIR/fairshare.png with the two allocation plots side by side.  The same runs from
the command line:

    kai replay examples/replay/cluster.yaml --trace examples/replay/trace.csv \\
        --config examples/replay/kvalue-1.yaml --period 60s --until 24h --out OUT_DIR
"""

from __future__ import annotations

import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from kai.replay import Replay, read_trace  # noqa: E402
from kai.replay.report import write_outputs  # noqa: E402
from kai.snapshot.loader import load_config_file, load_files  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else "replay-fairshare"
    cluster = load_files([os.path.join(HERE, "cluster.yaml")])
    trace = read_trace(os.path.join(HERE, "trace.csv"))
    fig, axes = plt.subplots(1, 2, figsize=(15, 4.5), sharey=True)
    for ax, k in zip(axes, ("0", "1")):
        config = load_config_file(os.path.join(HERE, f"kvalue-{k}.yaml"))
        result = Replay(cluster, trace, config=config, period=60, until=24 * 3600).run()
        write_outputs(result, os.path.join(out, f"kvalue-{k}"), table_format="csv")
        hours = [row.time / 3600 for row in result.timeline]
        for queue, color in zip(result.queues, ("tab:blue", "tab:orange")):
            ax.step(
                hours,
                [row.allocated[queue] for row in result.timeline],
                where="post",
                color=color,
                label=f"{queue} allocated",
            )
            ax.step(
                hours,
                [row.fair_share[queue] for row in result.timeline],
                where="post",
                color=color,
                linestyle=":",
                label=f"{queue} fair share",
            )
        ax.set_title(f"kValue {k}")
        ax.set_xlabel("hours")
        ax.grid(alpha=0.3)
        used = {q: 0.0 for q in result.queues}
        for record in result.records.values():
            used[record.trace.queue] += record.gpu_seconds / 3600
        print(f"kValue {k}: " + ", ".join(f"{q} {h:.0f} GPU-h" for q, h in used.items()))
    axes[0].set_ylabel("GPUs")
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.suptitle("Time-based fair share: 16 GPUs, two queues of 16-GPU jobs")
    fig.tight_layout()
    path = os.path.join(out, "fairshare.png")
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
