"""Kineto traces: what both sides share (``model``, ``categories``, ``boundary``, ``event_args``),
the write side (``write``: schema names and the atomic json/json.gz writer) and the read side
(``read``: the columnar reader, its parse cache and its memory settings). Neither side imports the other.
Importing this package loads nothing heavy; import the submodule you need."""
