"""The study: Optuna's storage, records, the ask/measure/tell loop and its workers."""
