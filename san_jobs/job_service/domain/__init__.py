"""The job domain: states, rules and policies. No gRPC, no SQL here."""
