"""resurrect: keeps distributed AI training jobs alive on GPU clusters."""

import os.path

from resurrect import source_tree

__version__ = "0.2.1"

source_tree.install(os.path.dirname(__file__))
