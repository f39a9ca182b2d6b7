"""The parts of kvpool.native, one module per subject; import their public names from
kvpool.native."""
