"""The simulators' ROS 2 nodes (table-top arm and MuJoCo ALOHA, ``oxygen_sim_node``) and the in-process loop
that runs the ALOHA node with the policy node over DDS."""
