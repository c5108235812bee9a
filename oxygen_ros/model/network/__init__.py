"""The π0.5-family network itself: configuration, layers, the two experts (MoT), vision, the VLA and its
sampling, input preprocessing and the CPU kernels the layers call."""
