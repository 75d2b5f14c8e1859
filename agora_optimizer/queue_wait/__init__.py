"""HPC queue wait: how long jobs wait in a SLURM partition's queue, and a model of it.

The SLURM client (:mod:`agora_optimizer.slurm`) reads the live queue (``slurm.queue``) and the
finished jobs (``slurm.accounting``); here ``recorder`` keeps one row per submitted job (the queue
at submit time and, later, its wait), ``features`` describes a queue as numbers, ``model`` learns
the wait from those rows, and ``catalog_delay`` makes the predicted wait the release time
(``release_s``, not billed) of a catalog's SLURM resource types.
"""
