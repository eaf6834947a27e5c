"""The request edges: the gRPC service, the checks every request passes, the
guard that counts and times them, and the purgatories where requests wait."""
