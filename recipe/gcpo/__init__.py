"""The GCPO recipe for verl 0.9.1 (estimator, trainer, credit actor and Hydra configs)."""
