"""gRPC transport: servicers, conversion between protobuf and the domain, error mapping."""
