"""Operator latency on an accelerator, and collective times over the cluster network."""

from phaze.cost.network import Network

__all__ = ["Network"]
