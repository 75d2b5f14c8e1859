"""The range of every number agora reads or writes, in one place.

Each is enforced where a number enters (the command line's options, the workflow, catalog and
plan readers) and where a plan leaves (the plan writer refuses what the reader would refuse), so
that a plan one command writes is one the next command can read. Beyond these a value is a unit
error, not a workload; ``inf`` and ``nan`` are never numbers here.
"""

from __future__ import annotations

MAX_RUNTIME_S = 1e8  # a task's runtime on a reference core: about three years
MAX_CORES = 4096
MAX_GPUS = 1024  # accelerators a task needs or a machine has (section 5 of the spec)
MAX_MEMORY_BYTES = 2**50  # 1 PiB
MAX_MACHINE_MEMORY_GIB = 65536.0  # one machine's memory (and the memory reserved for a task without a record)
MAX_TIME_S = 1e12  # any instant or duration of a plan (deadline, start, end, makespan); 1e8 s at speed 0.001 is 1e11
MAX_USD = 1e12  # any amount of money (budget, cost)
MAX_PLANNING_S = 86400.0  # a planning run's wall-time limit
TIME_TOLERANCE_S = 1e-6  # instants are compared within this (section 4 of the spec): equal within it is equal

# A catalog's resource types (section 2 of the spec).
MAX_SPEED = 1000.0  # per-core speed relative to the reference core
MIN_SPEED = 1e-3  # a thousandth of the reference core: below it durations overflow to infinity
MAX_PRICE_PER_HOUR_USD = 10_000.0
MAX_COUNT = 1_000_000  # machines of one type at once
MAX_GPU_MEMORY_GIB = 4096.0  # one accelerator's memory (for people: no rule reads it)
MAX_BILLING_S = 31 * 86400.0  # a billing granularity or minimum: a month
MIN_GRANULARITY_S = 1e-3
MAX_BOOT_S = 86400.0
MAX_INTERRUPTION_RATE_PER_HOUR = 3600.0  # a spot type's interruptions: one a second is a unit error
MIN_BANDWIDTH_BYTES_PER_S = 1.0
MAX_BANDWIDTH_BYTES_PER_S = 1e13
