"""CLI commands for the response stage/tool (see the module's owner issue)."""
