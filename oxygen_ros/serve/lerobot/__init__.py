"""LeRobot's async-inference gRPC protocol (``transport.AsyncInference``) served by the fleet scheduler."""
