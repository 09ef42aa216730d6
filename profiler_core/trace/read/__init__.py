"""The read side of traces: ``reader.read_trace`` and the strategies it chooses among (parse
cache, parser processes, streaming, whole file), the decoder and column builder behind them, the
parse cache, and ``lookup`` for one raw event of a loaded trace."""
