"""HPC queue wait: what a SLURM partition's queue looks like, how long jobs waited, and a model of it.

``snapshot`` reads the live queue (``squeue``), ``accounting`` reads finished jobs (``sacct``, or
the ``jobcomp/filetxt`` file), ``recorder`` keeps one row per submitted job (the queue at submit
time and, later, its wait), ``model`` learns the wait from those rows, and ``catalog_delay`` makes
the predicted wait the release time (``release_s``, not billed) of a catalog's SLURM resource types.
"""
