"""Flax models for tcl.jobs."""
