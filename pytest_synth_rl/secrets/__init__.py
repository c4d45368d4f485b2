"""secrets."""
