"""Compile and graph back-ends of the network: torch.compile (ahead-of-time artefacts), the compiled prefill,
CUDA graphs, and the choice among them (``action_sampler``)."""
