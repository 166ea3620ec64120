"""Kubernetes with Volcano: a run is one Volcano Job; code and state on a PVC."""
