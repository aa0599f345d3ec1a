"""The `dl2` command-line tool."""
