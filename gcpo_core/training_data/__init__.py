"""The training and validation sets in verl's parquet format (:mod:`gcpo_core.training_data.prepare`), written by
``scripts/prepare_data.py`` and read by every launcher; framework-free, so it lives here and not in the recipe."""
