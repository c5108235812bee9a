"""The ALOHA bimanual arm (two ViperX 300 6-DoF arms with parallel grippers) in MuJoCo, from gym-aloha's
assets: physics, the real driver's units, a scripted expert for transfer-cube, an environment for Python
callers, and the simulated driver that ``oxygen_sim_node``'s ``aloha`` backend puts on ROS topics.

Importing a submodule that touches MuJoCo sets ``MUJOCO_GL=egl`` unless the caller chose a backend: the
machines here render headless through Mesa's EGL.
"""
