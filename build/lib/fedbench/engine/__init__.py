"""The engine: round loop, cohort sampling, vectorised local training, evaluation."""
