"""Parsers for GPU telemetry a team already has: nvidia-smi CSV, `nvidia-smi dmon`, `dcgmi dmon`, DCGM exporter text.

Pure functions, no database: `parse_telemetry(text)` returns the samples it could read and, for
every line it could not use, a `LineProblem` naming the line and why. It never raises on bad input.
Line 0 in a problem means the file as a whole.

Units stored are the GpuSample ones: percent, bytes, watts, Celsius, MHz. A value the tool did not
report (`[N/A]`, `[Not Supported]`, `-`, a DCGM blank sentinel) stays None, never zero.

Timestamps: nvidia-smi and dmon print local time without a zone; they are read in `tz` (UTC when
not given). Files without timestamps get one sample per second per GPU from `start`.

Hostile text: a line longer than MAX_LINE_CHARS is named and skipped before any parsing, the
Prometheus text is read by a single left-to-right scan (no regular expression over labels), and
at most MAX_PROBLEMS problems are kept (the rest are counted), so the work per file is linear in
its size.

MIG: a MIG instance (dcgm-exporter's `GPU_I_ID`) is a GPU of its own, stored under
`mig_gpu_index(gpu, instance)`; `gpu_label` names any stored index for charts.
"""
