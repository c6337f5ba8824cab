"""Model backends: ``local`` (offline algorithms), ``openai`` (HTTP) and ``instant``."""
