"""Who calls JobService, and what they may do: bearer tokens stored as hashes, with
an optional expiry (bearer_tokens.py, --auth token), client certificates on an allow-list
(certificates.py, --tls-client-roles), the role table (roles.py), the interceptor that
applies them to every RPC (interceptor.py), and the periodic check that ends a stream
whose token was revoked or has expired (stream_checks.py)."""
