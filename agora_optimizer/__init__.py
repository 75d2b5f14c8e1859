"""agora: a cost-performance optimizer that places each task of a DAG on the right resource."""

__version__ = "0.1.0"
