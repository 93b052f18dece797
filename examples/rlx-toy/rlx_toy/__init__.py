"""rlx-toy: an example RLX backend plugin (see README.md). Import nothing heavy here:
the registry imports ``rlx_toy.plugin``, and with it this package, in every process."""
__version__ = "0.1.0"
