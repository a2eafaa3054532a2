"""A tiny to-do list manager."""
