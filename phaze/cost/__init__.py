"""Operator latency on an accelerator, and collective times over the cluster network."""

from phaze.cost.latency import OpLatency, op_latencies, roofline_s
from phaze.cost.network import Network

__all__ = ["Network", "OpLatency", "op_latencies", "roofline_s"]
