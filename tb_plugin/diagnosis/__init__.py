"""The diagnosis: what set a step's time and what a fix could win back, from the analysis stages of one trace
(per worker) and from the per-worker summaries (per run). One module per job; docs/diagnosis.md."""
