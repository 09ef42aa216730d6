"""Per-worker summaries: a few KB per trace file that the run-level views read instead of the trace.

`summary.summarize(t)` builds one from a parsed trace; `store` keeps them (versioned JSON, gzipped)
beside the parse cache and in the logdir's hidden `.gpuscope/summaries/` folder; `engine` computes
missing ones in the background or on a Dask cluster; `cli` is `gpuscope summarize`.
"""
