"""JobService: durable background AI jobs over gRPC."""
