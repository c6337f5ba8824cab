"""jobsctl: the operators' command line for JobService (see ``jobsctl --help``)."""

import os

# gRPC's core logs a failed TLS handshake (and more) on stderr by itself, before and
# beside the one-line error jobsctl prints. It reads this variable once, when grpc is
# first imported, which is after this package is: set it here, unless the user asks
# for gRPC's own logs (GRPC_VERBOSITY=debug to debug a connection).
os.environ.setdefault("GRPC_VERBOSITY", "NONE")
