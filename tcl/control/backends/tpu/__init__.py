"""TPU VM pods: the Cloud TPU API backend and what runs on each worker VM."""
