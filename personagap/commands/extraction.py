"""CLI commands for the extraction stage/tool (see the module's owner issue)."""
