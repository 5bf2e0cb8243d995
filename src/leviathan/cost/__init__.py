"""Predicted cost: FLOPs, bytes, memory, time and disk of a study on hardware it has not met yet.

Nothing in model, data, train or eval imports this package. Its predictions are printed
beside their measurements (the report's throughput table, `leviathan config show`)."""
