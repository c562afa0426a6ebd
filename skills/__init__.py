"""skills: built in a later issue (see ARCHITECTURE.md)."""
