"""CPU seconds of other processes, read from ``/proc`` (Linux): what the benches that time work done in attnviz's
isolation child add to their own ``time.process_time()``.  The child is still running when a round ends, so its
time is not yet in ``getrusage(RUSAGE_CHILDREN)``; ``/proc/PID/stat`` has it, in clock ticks (10 ms: sum many
rounds, or read ``/proc/PID/task/*/schedstat`` where nanoseconds matter)."""

from __future__ import annotations

import os

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (its parentheses may hold spaces), from the state
    on: [0] state, [1] parent pid, [11] utime, [12] stime; None for a process gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def ticks_cpu_s(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used (0 for one gone)."""
    st = _stat(pid)
    return (int(st[11]) + int(st[12])) * TICK_S if st else 0.0


def children_cpu_s(parent: int | None = None) -> float:
    """User + system CPU seconds of the live processes whose parent is ``parent`` (default: this process)."""
    parent = os.getpid() if parent is None else parent
    total = 0.0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            st = _stat(pid)
            if st and int(st[1]) == parent:
                total += (int(st[11]) + int(st[12])) * TICK_S
    return total
