"""Generated protobuf and gRPC modules for the kubelet's PodResources API v1 (api.proto here;
the command that regenerates them is at its top). Needs the agent's ``kubernetes`` extra
(grpcio, protobuf); nothing else in the agent imports this package unless it is installed."""
