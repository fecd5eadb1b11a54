"""phaze: joint accelerator-architecture and device-placement search for LLM training."""
