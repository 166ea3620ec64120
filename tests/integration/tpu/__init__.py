"""TPU VM pods: the worker bootstrap, and (later) the backend against the Cloud TPU API emulator."""
