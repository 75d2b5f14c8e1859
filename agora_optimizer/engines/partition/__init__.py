"""Partitioning engines: the ICPP'24 memory-constrained heuristic (Kulagina, Meyerhenke and Benoit)
and its homogeneous baseline, on a kit of task graph, placement and simulation."""
