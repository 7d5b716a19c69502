"""Storage and engines with no stage logic: stages call into these, never the other way round."""
