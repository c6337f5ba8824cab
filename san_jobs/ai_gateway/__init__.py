"""AiGateway: the one place that talks to models."""
