"""Sweeps: matrices of entries, claimed with leases by any number of schedulers."""
