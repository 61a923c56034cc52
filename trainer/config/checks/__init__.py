"""The config's cross-field rules, one module per knob family (decision 0052).

Each rule is a plain function over a built `PipelineConfig` returning `ConfigIssue`s (errors name the field path
and what would be valid; a knob that does nothing is a warning). `trainer/config/validation.py::check_rules`
runs them in a fixed order; only validation imports these modules, and they sit above `trainer/config/topology.py`
(tests/test_repository.py::test_config_sections_and_checks_keep_their_place).
"""
