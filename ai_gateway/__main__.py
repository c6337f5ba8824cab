"""``python -m ai_gateway``: the same as the ``ai-gateway`` command."""

from ai_gateway.cli import main

main()
