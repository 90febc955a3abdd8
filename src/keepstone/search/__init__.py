"""Search primitives shared by the document and record indexes (docs/search.md): Markdown
chunking, the keyword side's text analysis, vector math and caches, and score fusion.
Pure computation: no I/O, no database."""
