"""Everything resurrect knows about Temporal itself: connecting (``client``), the embedded
dev server (``server``) and the search attributes its workflows set (``search_attributes``)."""
