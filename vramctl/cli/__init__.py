"""The command line: one module per command, each parse → one library call → render."""
