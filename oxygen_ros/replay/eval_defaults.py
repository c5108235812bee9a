"""``oxygen-replay eval``'s defaults that its command line shows (no imports: ``--help`` stays instant)."""

DEFAULT_GAP_S = 1.0  # without episode events: joint states silent this long, the recording paused between episodes
DEFAULT_WARN_S = 0.1  # a camera stamped this far from the joint states moves a 50 Hz command five steps
