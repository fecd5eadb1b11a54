"""One accelerator point's layer latencies, from operator costs to scheduled layers, without the configuration:
`phaze.pipeline` reads cfg and hands these modules plain values."""
