"""A local pool's capacity (:class:`LocalPool`), its devices, and the CPU and GPU slices of its planned machines.

A pool is a catalog resource with ``backend: local``: ``vcpus`` x ``count`` cores and ``memory_gib`` x
``count`` of memory, optionally pinned to ``cpu_set``, and ``gpus`` x ``count`` GPUs, the devices
``gpu_ids`` (default ``0 .. gpus x count - 1``): indices into the devices the scheduler may use
(:func:`scheduler_devices`, :func:`pool_devices`). Machine ``TYPE#k`` of a pool gets the k-th run of its
type's CPUs and GPUs (:func:`machine_cpus`, :func:`machine_gpus`); its jobs run :func:`pinned` to them,
with :func:`gpu_environment`. The pools' bookkeeping is :mod:`~agora_optimizer.executor.backends.local.backend`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agora_optimizer.executor.jobs.spec import BackendError
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.workflow import shown


@dataclass(frozen=True)
class LocalPool:
    """The capacity of one local resource: cores, memory and GPUs, the host's ids of its CPUs, and the indices
    of its GPUs among the devices the scheduler may use (:func:`pool_devices` maps them to devices)."""

    name: str
    cores: int
    memory_bytes: int
    cpu_set: tuple[int, ...] = ()
    gpus: int = 0
    gpu_ids: tuple[int, ...] = ()  # indices into the scheduler's devices; empty: 0 .. gpus - 1

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """The indices of the pool's GPUs among the devices the scheduler may use (``gpu_ids``, or their default)."""
        return self.gpu_ids or tuple(range(self.gpus))

    @classmethod
    def from_resource(cls, resource: Resource) -> LocalPool:
        machines = resource.count or 1
        cpus = _ids(resource, "cpu_set", "CPU")
        gpus = resource.gpus * machines
        gpu_ids = _ids(resource, "gpu_ids", "GPU device")
        if gpu_ids and (len(gpu_ids) != gpus or len(set(gpu_ids)) != gpus):
            raise BackendError(
                "local",
                f"resource {resource.name}: gpu_ids must list the pool's {gpus} GPUs (gpus x count), "
                f"each once, got {list(gpu_ids)}",
                transient=False,
            )
        return cls(resource.name, resource.vcpus * machines, resource.memory_bytes * machines, cpus, gpus, gpu_ids)


def _ids(resource: Resource, key: str, what: str) -> tuple[int, ...]:
    raw = resource.extra.get(key, ())
    if not isinstance(raw, list | tuple) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in raw
    ):
        raise BackendError(
            "local", f"resource {resource.name}: {key} must be a list of {what} ids, got {shown(raw)}", transient=False
        )
    return tuple(raw)


def scheduler_devices(visible: str | None) -> tuple[str, ...] | None:
    """The GPUs the scheduler may use, as its ``CUDA_VISIBLE_DEVICES`` (``visible``) names them: host
    numbers, ``GPU-<uuid>`` or MIG ids, kept as strings; None when it has none (every device of the host).

    Read as CUDA reads it: up to the first entry that is empty or negative, so that ``""`` and ``"-1"``
    (the usual ways to hide every GPU) mean no GPU at all.
    """
    if visible is None:
        return None
    devices: list[str] = []
    for entry in (part.strip() for part in visible.split(",")):
        if not entry or entry.startswith("-"):
            break
        devices.append(entry)
    return tuple(devices)


def pool_devices(pool: LocalPool, visible: tuple[str, ...] | None) -> tuple[str, ...]:
    """The devices of ``pool``'s GPUs as its jobs' ``CUDA_VISIBLE_DEVICES`` names them: its ``gpu_ids``
    looked up in ``visible`` (:func:`scheduler_devices`), or the host numbers they are when that is None.

    BackendError (not transient), naming the resource and both lists, when an index reaches past
    ``visible``: the pool would hand its jobs a device the scheduler was not given.
    """
    indices = pool.gpu_indices
    if visible is None:
        return tuple(str(index) for index in indices)
    if indices and not visible:
        raise BackendError(
            "local",
            f"resource {pool.name}: has {pool.gpus} GPUs but the scheduler's CUDA_VISIBLE_DEVICES shows none; "
            "drop the pool's gpus or give the scheduler its GPUs",
            transient=False,
        )
    if any(index >= len(visible) for index in indices):
        raise BackendError(
            "local",
            f"resource {pool.name}: gpu_ids {list(indices)} reach past the scheduler's CUDA_VISIBLE_DEVICES "
            f"{list(visible)}; gpu_ids index that list (0 .. {len(visible) - 1})",
            transient=False,
        )
    return tuple(visible[index] for index in indices)


def machine_cpus(pool_cpus: Sequence[int], machine: str, vcpus: int) -> tuple[int, ...]:
    """The CPUs of planned machine ``TYPE#k``: the k-th run of ``vcpus`` of ``pool_cpus``, wrapping around.

    Machines of a pool then get disjoint slices while the pool has CPUs enough, and share them
    round-robin when it has not (a pool of 2 CPUs whose type has 2 vcpus: every machine gets both).
    """
    if not pool_cpus or vcpus < 1:
        raise BackendError(
            "local", f"machine {machine}: no CPUs to give it ({list(pool_cpus)}, {vcpus} vcpus)", transient=False
        )
    return _slice(pool_cpus, machine, vcpus)


def machine_gpus(pool_gpus: Sequence[str], machine: str, gpus: int) -> tuple[str, ...]:
    """The GPUs of planned machine ``TYPE#k``: the k-th run of ``gpus`` of ``pool_gpus`` (in the pool's order),
    as :func:`machine_cpus` slices CPUs; none for a type without GPUs. The pool never lends one device to
    two tasks at once, so machines that share a device when the pool has too few (it wraps) wait for
    each other."""
    if gpus < 1 or not pool_gpus:
        return ()
    return tuple(pool_gpus[at] for at in _slice(range(len(pool_gpus)), machine, gpus))


def _slice(ids: Sequence[int], machine: str, size: int) -> tuple[int, ...]:
    try:
        index = int(machine.rsplit("#", 1)[1])
    except (IndexError, ValueError):
        index = 0
    picked = [ids[(index * size + offset) % len(ids)] for offset in range(size)]
    return tuple(sorted(set(picked)))


def check_fits(what: str, cores: int, memory_bytes: int, where: str, has_cores: int, has_memory_bytes: int) -> None:
    """Refuse (BackendError, not transient) ``what`` when it needs more than ``where`` has."""
    if cores > has_cores or memory_bytes > has_memory_bytes:
        raise BackendError(
            "local",
            f"{what} needs {cores} cores and {memory_bytes} bytes; {where} has {has_cores} cores and "
            f"{has_memory_bytes} bytes",
            transient=False,
        )


def check_gpus(what: str, gpus: int, where: str, has_gpus: int) -> None:
    """Refuse (BackendError, not transient) ``what`` when it reserves more GPUs than ``where`` has."""
    if gpus > has_gpus:
        raise BackendError("local", f"{what} reserves {gpus} GPUs; {where} has {has_gpus}", transient=False)


def check_disjoint_gpus(pool_gpus: Mapping[str, Sequence[str]]) -> None:
    """Refuse pools (by name, their devices) that claim one GPU device twice: the backend would lend it to
    two tasks at once."""
    owner: dict[str, str] = {}
    for pool, devices in pool_gpus.items():
        for device in devices:
            if device in owner:
                raise BackendError(
                    "local",
                    f"pools {owner[device]} and {pool} both hold GPU {device}; give them disjoint gpu_ids",
                    transient=False,
                )
            owner[device] = pool


def gpu_environment(environment: Mapping[str, str], devices: Sequence[str]) -> dict[str, str]:
    """``environment`` with ``CUDA_VISIBLE_DEVICES`` set to ``devices`` (empty: the task sees no GPU), and
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` unless the scheduler or the job sets an order, so that the ids mean the
    devices ``nvidia-smi`` numbers so (CUDA's own default order is fastest first)."""
    order = environment.get("CUDA_DEVICE_ORDER") or os.environ.get("CUDA_DEVICE_ORDER") or "PCI_BUS_ID"
    return {
        **environment,
        "CUDA_VISIBLE_DEVICES": ",".join(devices),
        "CUDA_DEVICE_ORDER": order,
    }


def pinned(command: Sequence[str], cpus: Sequence[int]) -> tuple[str, ...]:
    """The worker command with ``--cpu-set`` set to ``cpus`` (replacing the pool's, before any ``--``)."""
    words = list(command)
    end = words.index("--") if "--" in words else len(words)
    head, tail = words[:end], words[end:]
    if "--cpu-set" in head:
        at = head.index("--cpu-set")
        del head[at : at + 2]
    return (*head, "--cpu-set", ",".join(str(cpu) for cpu in cpus), *tail)
