"""Wire types and errors shared by the runner and the shim (and the pieces both use).

Neither agent imports the other: what both speak (a cluster filesystem's description, a mount
failure) lives here, and this package imports neither of them.
"""
