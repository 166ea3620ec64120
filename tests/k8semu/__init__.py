"""A Kubernetes + Volcano emulator for tests; ``crd`` validates vcjobs against the real CRD."""
