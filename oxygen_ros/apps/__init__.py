"""Commands that cross layers: the ``oxygen-sim`` entry point, whose ALOHA commands can start the ROS loop."""
