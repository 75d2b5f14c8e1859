"""Planning engines, one module per algorithm, all behind :class:`~agora_optimizer.engines.base.Engine`."""
