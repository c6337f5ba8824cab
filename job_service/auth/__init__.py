"""Who calls JobService, and what they may do (--auth token): bearer tokens stored as
hashes (tokens.py), the role table (roles.py), and the interceptor that applies both
to every RPC (interceptor.py)."""
