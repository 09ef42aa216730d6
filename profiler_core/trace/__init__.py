"""The trace model shared by the profiler and the plugin: Kineto schema names (``schema``), the
atomic json/json.gz writer (``writer``), and the fast columnar reader (``reader``, ``model``,
``cache``). Importing this package loads nothing heavy; import the submodule you need."""
