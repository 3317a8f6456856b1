"""CLI commands for the dashboard stage/tool (see the module's owner issue)."""
