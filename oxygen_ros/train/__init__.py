"""Training of the demo policy on scripted-expert data (ROS-free)."""
