"""The config's section models, one module per knob family (decision 0052).

Each family module owns its section models (the nested keys: `actor_train.model_args`, `health`, …) and its flat
top-level keys as a `PipelineConfig` mixin (`ExperimentKnobs`, `LossKnobs`, …); `trainer/config/schema.py`
assembles `PipelineConfig` from them. These modules sit at the bottom of the config package: they import only
`base` and each other, `device_mapping`, `registries` and `trainer.telemetry.events`, never `schema`, `topology`,
`validation` or `checks` (tests/test_repository.py::test_config_sections_and_checks_keep_their_place).
"""
