"""The write side of traces: Kineto schema names and document building (``schema``) and the
atomic json/json.gz writer (``writer``)."""
