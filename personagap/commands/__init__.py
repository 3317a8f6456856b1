"""CLI commands, one module per stage or tool; importing a module registers its commands."""
