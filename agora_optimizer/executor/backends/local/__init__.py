"""Local pools: each task attempt a worker process on this machine, within its pool's cores, memory and GPUs.

``backend`` holds the pools' bookkeeping (:class:`~agora_optimizer.executor.backends.local.backend.LocalBackend`),
``processes`` the worker processes (the warm fork server, sessions, signals, what an exited worker says)
and ``fork_server`` the module the fork server imports to warm up.
"""
