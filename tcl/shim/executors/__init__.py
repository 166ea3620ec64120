"""Executors run a task's runner: in a Docker container or as a child process."""
