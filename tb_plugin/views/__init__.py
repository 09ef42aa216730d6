"""The plugin's views: one module per view, each a pure function of `TraceData` -> JSON-able dict
(docs/internals.md §5, answers in docs/http-api.md); the numbers they share come from the analysis stages
(`profiler_core.analysis.stages`). Submodules are imported by the routes on demand."""
