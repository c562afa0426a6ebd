"""Matrices of deployments across hosts on Ray (`npu-deploy matrix`): the spec and its cells
(spec.py), what a node does with one cell (node.py), the head's collector that takes the
nodes' events into its store (collector.py), the driver that runs a matrix (driver.py), and
the comparison of two matrices (compare.py)."""
