"""agora's one SLURM client: used by the executor's SLURM backend and by the queue-wait model.

``commands`` runs SLURM's client programs (timeouts, errors that name the command), ``values``
reads what they print (times, memory, time limits, states), ``jobs`` reads squeue's and sacct's
records of given jobs (the backend's status), ``nodes`` a partition's nodes (``sinfo``),
``queue`` the whole live queue (``squeue``) and ``accounting`` the finished jobs with their
waits (``sacct``, or the ``jobcomp/filetxt`` file).
``errors`` holds :class:`SlurmCommandError` and :class:`SlurmOutputError`.
"""
