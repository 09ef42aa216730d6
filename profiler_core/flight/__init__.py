"""The flight recorder (docs/flight-recorder.md): always-on per-step telemetry of every rank of a training job, in
a file beside the traces, and rules that start a deep capture of the next steps when a step goes wrong.

`Recorder` is what a training loop uses; `Rules` the triggers' thresholds; `format` the telemetry file's records
and their reader (the plugin's `gpuscope telemetry` and heatmap read them through it).
"""

from profiler_core.flight.recorder import Recorder
from profiler_core.flight.rules import Rules, Trigger

__all__ = ["Recorder", "Rules", "Trigger"]
