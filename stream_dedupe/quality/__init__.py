"""Quality measurement: exact ground truth and how the engine and baselines compare to it."""
