"""npu_tui: built in a later issue (see ARCHITECTURE.md)."""
