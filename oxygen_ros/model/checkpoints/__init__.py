"""Checkpoint formats: openpi and LeRobot files read into the network (key maps, shapes, streamed tensors),
their config sidecars and normalization statistics."""
