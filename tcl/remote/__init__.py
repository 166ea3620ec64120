"""Run a notebook's function on a remote accelerator and write its globals back: `@tcl.remote`.

Submodules are imported on demand (`import tcl` stays light, and the remote worker imports only
`wire` and `payload`, which need nothing beyond the stdlib and cloudpickle)."""
