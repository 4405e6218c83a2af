"""The calibration store: what every compile reported, kept across studies
(docs/calibration.md)."""
