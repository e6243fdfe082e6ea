"""resurrect: keeps distributed AI training jobs alive on GPU clusters."""

__version__ = "0.2.1"
