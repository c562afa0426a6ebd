"""The Phase-6 performance report: gathered from a run's log (`gather`), drawn as
report.md and two plots (`render`), and stored as blobs by the step both agents take
(`write`)."""
