"""The engine's scheduling modes by name, without torch (the configuration and ``--help`` read them here)."""

MODES = ("action_only", "sequential", "parallel", "shared", "oxygen")
# The modes that serve several robots from one engine (oxygen-serve's fleet scheduler takes these only).
FLEET_MODES = ("oxygen", "action_only")
