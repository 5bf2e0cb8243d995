"""Training one experiment cell: recipe, exact resume, preemption, DDP, telemetry."""
